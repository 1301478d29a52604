#!/usr/bin/env bash
# Regenerates what is derived from the lockstep.dev API types in kube/apis:
#   kube/apis/*/zz_generated.deepcopy.go   DeepCopy methods
#   deploy/crds/lockstep.dev_*.yaml        the CustomResourceDefinitions
# with a pinned controller-gen, run through `go run pkg@version` so that
# controller-tools stays out of the main go.mod. The output is committed and
# the same on every run; `make check-generated` fails when it is stale.
#
#   kube/generate.sh        (or: make generate)
set -euo pipefail

# controller-tools v0.18 is the release built against Kubernetes 1.33, the
# version lockstep's client libraries and test API server are at.
CONTROLLER_GEN=sigs.k8s.io/controller-tools/cmd/controller-gen@v0.18.0

cd "$(dirname "$0")/.."

# Remove earlier output first, so a renamed or deleted type leaves no
# orphan CRD behind.
rm -f deploy/crds/lockstep.dev_*.yaml kube/apis/*/zz_generated.deepcopy.go
mkdir -p deploy/crds

echo "kube/generate.sh: running ${CONTROLLER_GEN##*/} (the first run builds it)" >&2

# DeepCopy methods. The generator gives root types a DeepCopyObject that
# returns the upstream runtime.Object; lockstep's own runtime.Object (in
# kube/api/runtime) is what they satisfy, so the import is pointed there.
go run "$CONTROLLER_GEN" object paths=./kube/apis/...
for f in kube/apis/*/zz_generated.deepcopy.go; do
	sed -i 's#runtime "k8s.io/apimachinery/pkg/runtime"#"lockstep.dev/lockstep/kube/api/runtime"#' "$f"
	gofmt -w "$f"
done

# CRDs. controller-gen recognises an object by the upstream TypeMeta and
# ObjectMeta, and knows the schemas of the upstream Time and Condition; the
# types use lockstep's own (kube/api/meta/v1, the same JSON). So the CRDs
# are generated from a copy of kube/apis whose imports name the upstream
# packages: the same fields, tags, comments and markers.
shadow=$(mktemp -d kube/crdgen.XXXXXX)
trap 'rm -rf "$shadow"' EXIT
for dir in kube/apis/*/; do
	version=$(basename "$dir")
	mkdir -p "$shadow/$version"
	for f in "$dir"*.go; do
		case "$f" in *_test.go | */zz_generated.*) continue ;; esac
		sed -e 's#"lockstep.dev/lockstep/kube/api/meta/v1"#"k8s.io/apimachinery/pkg/apis/meta/v1"#' \
			-e 's#"lockstep.dev/lockstep/kube/api/types"#"k8s.io/apimachinery/pkg/types"#' \
			-e 's#"lockstep.dev/lockstep/kube/api/schema"#"k8s.io/apimachinery/pkg/runtime/schema"#' \
			"$f" >"$shadow/$version/$(basename "$f")"
	done
done
go run "$CONTROLLER_GEN" \
	crd:crdVersions=v1 \
	paths="./$shadow/..." \
	output:crd:dir=deploy/crds
echo "kube/generate.sh: wrote $(ls deploy/crds/lockstep.dev_*.yaml | tr '\n' ' ')and kube/apis/*/zz_generated.deepcopy.go" >&2
