// Package ociimage writes container images without a container engine: one
// uncompressed layer built from a list of files, an image config, and the
// archive that carries them.
//
// lockstep ships as an image (deploy/ runs `lockstep:dev`), and the machines
// that build it have no Docker engine. The image is therefore assembled here,
// byte by byte, from files the build machine already has.
//
// # The archive
//
// [Write] produces one tar that is at the same time
//
//   - an OCI image layout (image-spec v1.1): `oci-layout`, `index.json` and
//     `blobs/sha256/...`, with the index entry annotated both with
//     `org.opencontainers.image.ref.name` (the tag) and with containerd's
//     `io.containerd.image.name` (the full, normalised name such as
//     docker.io/library/lockstep:dev), and
//   - a docker-archive: `manifest.json` listing the config and layer blobs
//     and the familiar RepoTags (lockstep:dev).
//
// That is the shape `docker save` writes since Docker 25, so every importer
// takes it: `ctr images import` (containerd 1.6 and 2.x) reads index.json
// and names the image from io.containerd.image.name, which is exactly the
// name the CRI plugin looks up for a pod's `image: lockstep:dev`; `kind load
// image-archive` reads manifest.json for the tags and then runs that same
// ctr import on each node; `docker load` reads manifest.json (or index.json
// with the containerd image store).
//
// # Why one uncompressed layer
//
// The layer is a plain tar with media type
// `application/vnd.oci.image.layer.v1.tar`, so its digest is its diff ID.
// Every importer accepts that type (containerd 1.6 included), nothing ever
// pulls the image over a network, and skipping gzip removes the one step
// whose output depends on a compressor's version.
//
// # Determinism
//
// The same inputs give the same bytes, hence the same digests: entries are
// sorted by path, every timestamp is [Image.Created] (the Unix epoch unless
// set), owners are uid/gid 0 with no user or group names, JSON has a fixed
// field order, and the archive's own members are written in a fixed order.
// Parent directories that are not listed are added with mode 0755.
package ociimage
