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
go run "$CONTROLLER_GEN" \
	object \
	crd:crdVersions=v1 \
	paths=./kube/apis/... \
	output:crd:dir=deploy/crds
echo "kube/generate.sh: wrote $(ls deploy/crds/lockstep.dev_*.yaml | tr '\n' ' ')and kube/apis/*/zz_generated.deepcopy.go" >&2
