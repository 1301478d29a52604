package ociimage

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrInvalidReference is returned for an image name that registries,
// containerd and Kubernetes would not all read the same way.
var ErrInvalidReference = errors.New("invalid image reference")

// defaultDomain is the registry a name without one belongs to: Kubernetes
// (through the CRI) and containerd both complete `lockstep:dev` to
// docker.io/library/lockstep:dev.
const defaultDomain = "docker.io"

var (
	pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	domainPattern = regexp.MustCompile(`^(?:localhost|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*)(?::[0-9]+)?$`)
	tagPattern    = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127}$`)
)

// Reference is an image name split the way registries and containerd read
// it: docker.io/library/lockstep:dev is Domain docker.io, Path
// library/lockstep, Tag dev.
type Reference struct {
	Domain string
	Path   string
	Tag    string
}

// ParseReference reads an image name as Kubernetes does: a name without a
// registry is on docker.io, a single-component name on docker.io is in
// library/, and a name without a tag is :latest. Digest references are
// refused: an image written here is named by a tag.
func ParseReference(name string) (Reference, error) {
	if name == "" {
		return Reference{}, fmt.Errorf("parse image name: %w: empty", ErrInvalidReference)
	}
	if strings.Contains(name, "@") {
		return Reference{}, fmt.Errorf("parse image name %q: %w: digests are not names; give a tag", name, ErrInvalidReference)
	}
	rest, tag := name, "latest"
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		rest, tag = name[:i], name[i+1:]
	}
	if !tagPattern.MatchString(tag) {
		return Reference{}, fmt.Errorf("parse image name %q: %w: bad tag %q", name, ErrInvalidReference, tag)
	}
	domain, path := defaultDomain, rest
	if first, remainder, ok := strings.Cut(rest, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		domain, path = first, remainder
	}
	if domain == "index.docker.io" {
		domain = defaultDomain
	}
	if !domainPattern.MatchString(domain) {
		return Reference{}, fmt.Errorf("parse image name %q: %w: bad registry %q", name, ErrInvalidReference, domain)
	}
	if domain == defaultDomain && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	for _, c := range strings.Split(path, "/") {
		if !pathComponent.MatchString(c) {
			return Reference{}, fmt.Errorf("parse image name %q: %w: bad path component %q (lower-case letters, digits and . _ - only)", name, ErrInvalidReference, c)
		}
	}
	return Reference{Domain: domain, Path: path, Tag: tag}, nil
}

// String returns the full name, e.g. docker.io/library/lockstep:dev: the
// name containerd stores and the CRI plugin looks up.
func (r Reference) String() string { return r.Domain + "/" + r.Path + ":" + r.Tag }

// Familiar returns the short name Docker shows, e.g. lockstep:dev: the
// form `docker save` writes into manifest.json's RepoTags.
func (r Reference) Familiar() string {
	if r.Domain != defaultDomain {
		return r.String()
	}
	path := r.Path
	if short, ok := strings.CutPrefix(path, "library/"); ok && !strings.Contains(short, "/") {
		path = short
	}
	return path + ":" + r.Tag
}
