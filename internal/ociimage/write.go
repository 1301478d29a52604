package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sort"
	"time"
)

// Media types of what Write puts in the archive (image-spec v1.1).
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// Annotations on the index entry that name the image.
const (
	// AnnotationRefName is the OCI tag name, e.g. "dev".
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationImageName is containerd's full name, e.g.
	// "docker.io/library/lockstep:dev"; `ctr images import` names the image
	// with it.
	AnnotationImageName = "io.containerd.image.name"
)

// Config is what a runtime reads from the image config to start a
// container.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// User is "uid", "uid:gid" or a name from the image's /etc/passwd.
	User   string
	Labels map[string]string
	// Architecture, Variant and OS are spelt as Go does (amd64, arm64,
	// linux). Empty Architecture is runtime.GOARCH; empty OS is linux.
	Architecture string
	Variant      string
	OS           string
}

// Image is everything Write needs.
type Image struct {
	// Name is the image's reference, e.g. lockstep:dev; see ParseReference.
	Name    string
	Config  Config
	Entries []Entry
	// Created is the config's creation time and every layer entry's mtime.
	// The zero value is the Unix epoch, which keeps builds reproducible.
	Created time.Time
	// CreatedBy, when set, becomes the layer's history entry (what `docker
	// history` shows).
	CreatedBy string
}

// Written describes an archive Write produced.
type Written struct {
	Reference Reference
	// ManifestDigest is the image's digest, the one `ctr images ls` and a
	// registry show (sha256:...).
	ManifestDigest string
	// ConfigDigest is the image ID `docker images` shows.
	ConfigDigest string
	// LayerDigest is the layer's digest and also its diff ID.
	LayerDigest string
	LayerSize   int64
	// Entries counts the layer's entries, implied directories included.
	Entries int
}

// Write writes img to w as an OCI image layout that is also a
// docker-archive (see the package documentation).
func Write(w io.Writer, img Image) (Written, error) {
	ref, err := ParseReference(img.Name)
	if err != nil {
		return Written{}, err
	}
	entries, err := tree(img.Entries)
	if err != nil {
		return Written{}, err
	}
	created := img.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()

	var layer bytes.Buffer
	if err := writeLayer(&layer, entries, created); err != nil {
		return Written{}, err
	}
	layerDesc := describe(MediaTypeLayer, layer.Bytes())

	platform := platformOf(img.Config)
	cfg := imageConfig{
		Created:      created.Format(time.RFC3339),
		Architecture: platform.Architecture,
		Variant:      platform.Variant,
		OS:           platform.OS,
		Config: containerConfig{
			User:       img.Config.User,
			Env:        img.Config.Env,
			Entrypoint: img.Config.Entrypoint,
			Cmd:        img.Config.Cmd,
			WorkingDir: img.Config.WorkingDir,
			Labels:     img.Config.Labels,
		},
		RootFS: rootFS{Type: "layers", DiffIDs: []string{layerDesc.Digest}},
	}
	if img.CreatedBy != "" {
		cfg.History = []history{{Created: cfg.Created, CreatedBy: img.CreatedBy}}
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return Written{}, fmt.Errorf("encode the image config: %w", err)
	}
	cfgDesc := describe(MediaTypeConfig, cfgJSON)

	manifestJSON, err := json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeManifest,
		Config:        cfgDesc,
		Layers:        []descriptor{layerDesc},
	})
	if err != nil {
		return Written{}, fmt.Errorf("encode the manifest: %w", err)
	}
	manifestDesc := describe(MediaTypeManifest, manifestJSON)

	indexEntry := manifestDesc
	indexEntry.Platform = &platform
	indexEntry.Annotations = map[string]string{
		AnnotationImageName: ref.String(),
		AnnotationRefName:   ref.Tag,
	}
	indexJSON, err := json.Marshal(index{
		SchemaVersion: 2,
		MediaType:     MediaTypeIndex,
		Manifests:     []descriptor{indexEntry},
	})
	if err != nil {
		return Written{}, fmt.Errorf("encode index.json: %w", err)
	}
	dockerJSON, err := json.Marshal([]dockerManifest{{
		Config:   blobPath(cfgDesc.Digest),
		RepoTags: []string{ref.Familiar()},
		Layers:   []string{blobPath(layerDesc.Digest)},
	}})
	if err != nil {
		return Written{}, fmt.Errorf("encode manifest.json: %w", err)
	}

	blobs := map[string][]byte{
		layerDesc.Digest:    layer.Bytes(),
		cfgDesc.Digest:      cfgJSON,
		manifestDesc.Digest: manifestJSON,
	}
	if err := writeArchive(w, blobs, created, []file{
		{"index.json", indexJSON},
		{"manifest.json", dockerJSON},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	}); err != nil {
		return Written{}, err
	}
	return Written{
		Reference:      ref,
		ManifestDigest: manifestDesc.Digest,
		ConfigDigest:   cfgDesc.Digest,
		LayerDigest:    layerDesc.Digest,
		LayerSize:      layerDesc.Size,
		Entries:        len(entries),
	}, nil
}

type file struct {
	name string
	data []byte
}

// writeArchive writes the outer tar: blobs/sha256/ with the blobs in digest
// order, then the named files in the order given.
func writeArchive(w io.Writer, blobs map[string][]byte, mtime time.Time, files []file) error {
	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("write the archive: %w", err)
		}
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	members := make([]file, 0, len(digests)+len(files))
	for _, d := range digests {
		members = append(members, file{blobPath(d), blobs[d]})
	}
	for _, f := range append(members, files...) {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write %s into the archive: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("write %s into the archive: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish the archive: %w", err)
	}
	return nil
}

// describe returns the descriptor of data.
func describe(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// blobPath is where the OCI layout keeps the blob with digest d.
func blobPath(d string) string { return "blobs/sha256/" + d[len("sha256:"):] }

func platformOf(c Config) platform {
	p := platform{Architecture: c.Architecture, OS: c.OS, Variant: c.Variant}
	if p.Architecture == "" {
		p.Architecture = runtime.GOARCH
	}
	if p.OS == "" {
		p.OS = "linux"
	}
	return p
}

// The JSON documents, with the field names and order of image-spec v1.1
// and of `docker save`'s manifest.json.
type (
	descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Platform    *platform         `json:"platform,omitempty"`
	}
	platform struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Variant      string `json:"variant,omitempty"`
	}
	index struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Manifests     []descriptor `json:"manifests"`
	}
	manifest struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}
	imageConfig struct {
		Created      string          `json:"created"`
		Architecture string          `json:"architecture"`
		Variant      string          `json:"variant,omitempty"`
		OS           string          `json:"os"`
		Config       containerConfig `json:"config"`
		RootFS       rootFS          `json:"rootfs"`
		History      []history       `json:"history,omitempty"`
	}
	containerConfig struct {
		User       string            `json:"User,omitempty"`
		Env        []string          `json:"Env,omitempty"`
		Entrypoint []string          `json:"Entrypoint,omitempty"`
		Cmd        []string          `json:"Cmd,omitempty"`
		WorkingDir string            `json:"WorkingDir,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
	}
	rootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	}
	history struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	}
	dockerManifest struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
)
