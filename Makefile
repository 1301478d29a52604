# lockstep: `make demo` and `make test` are all a newcomer needs (as root).

GO       ?= go
# VERSION, COMMIT and DATE (the commit's time, UTC) are linked into the binary
# (internal/buildinfo): a build from sources without .git, such as an image
# build, passes them on the command line (make build COMMIT=... DATE=...).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git describe --match=NONE --always --abbrev=40 --dirty 2>/dev/null)
DATE     ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
BUILDINFO := lockstep.dev/lockstep/internal/buildinfo
LDFLAGS  := -s -w -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Commit=$(COMMIT) -X $(BUILDINFO).Date=$(DATE)
BIN      := bin
FUZZTIME ?= 20s

.PHONY: all build image deps generate generate-kube check-generated kube-testenv cross test test-packages test-unit test-realnode fuzz demo bench vet clean e2e-up e2e-down e2e

all: build

## build: static bin/lockstep and the bin/lockstep-cni symlink
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lockstep ./cmd/lockstep
	ln -sfn lockstep $(BIN)/lockstep-cni

## image: bin/lockstep-image.tar, the image deploy/ runs (lockstep:dev), for ctr images import, kind load image-archive or docker load
image: build
	$(GO) run ./tools/image lockstep -bin $(BIN)/lockstep -out $(BIN)/lockstep-image.tar

## deps: install the system packages tests and benchmarks use (idempotent)
deps:
	./tools/deps/install.sh

## generate: recompile bpf/ into agent/datapath with the pinned clang (clang-16), then generate-kube
generate: generate-kube
	$(GO) generate ./agent/datapath

## generate-kube: DeepCopy methods and deploy/crds from kube/apis, with the pinned controller-gen
generate-kube:
	./kube/generate.sh

## check-generated: fail when the committed eBPF objects or CRDs are not what their sources generate
check-generated: generate
	@git diff --quiet -- agent/datapath || { echo "agent/datapath: committed eBPF objects are stale; run make generate and commit"; git diff --stat -- agent/datapath; exit 1; }
	@test -z "$$(git status --porcelain -- deploy/crds 'kube/apis/*/zz_generated.deepcopy.go')" || { echo "kube: committed CRDs or DeepCopy code are stale; run make generate-kube and commit"; git status --short -- deploy/crds 'kube/apis/*/zz_generated.deepcopy.go'; exit 1; }

## kube-testenv: the Kubernetes binaries (apiserver, kubectl, kubelet, kube-proxy, controller-manager, scheduler, agnhost, the upstream e2e.test) and CoreDNS for the TestKube... and real-node tests, cached outside the repo (~17 min cold, instant warm)
kube-testenv:
	./tools/kube-testenv/build.sh >/dev/null

## cross: everything builds for Windows (the hns dataplane's home)
cross:
	GOOS=windows $(GO) build ./...

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

## test: everything, privileged tests included (run as root): the packages' tests beside the real-node tests (which mostly wait on their cluster); as root a skipped test fails the run (tools/noskip)
test: deps build vet cross check-generated kube-testenv
	$(MAKE) --no-print-directory -j2 test-packages test-realnode

## test-packages: the tests of every package but test/realnode, privileged ones included when run as root
test-packages:
	LOCKSTEP_PRIVILEGED=$$( [ "$$(id -u)" = 0 ] && echo 1 ) $(GO) run ./tools/noskip -count=1 -timeout 30m $$($(GO) list ./... | grep -v /test/realnode)

## test-realnode: the tests on a real two-node cluster (test/realnode): brings one up, replacing any make e2e-up left, and takes it down
test-realnode:
	LOCKSTEP_PRIVILEGED=$$( [ "$$(id -u)" = 0 ] && echo 1 ) $(GO) run ./tools/noskip -count=1 -timeout 40m ./test/realnode/

## test-unit: only the tests that need no privileges
test-unit:
	$(GO) test -count=1 ./...

## fuzz: run every fuzzer for FUZZTIME each
fuzz:
	$(GO) test ./cni/config -run '^$$' -fuzz '^FuzzParseNetConf$$' -fuzztime $(FUZZTIME)
	$(GO) test ./cni/config -run '^$$' -fuzz '^FuzzParseArgs$$' -fuzztime $(FUZZTIME)
	$(GO) test ./agent/manifests -run '^$$' -fuzz '^FuzzLoadDocument$$' -fuzztime $(FUZZTIME)
	$(GO) test ./agent/manifests -run '^$$' -fuzz '^FuzzJSONListMatchesWholeDocument$$' -fuzztime $(FUZZTIME)
	$(GO) test ./agent/endpoints -run '^$$' -fuzz '^FuzzParsePins$$' -fuzztime $(FUZZTIME)

## e2e-up: a real two-node cluster in network namespaces, lockstep installed from deploy/ (E2E_FLAGS="--dataplane iptables" to choose)
e2e-up: deps kube-testenv
	$(GO) run ./tools/e2e up $(E2E_FLAGS)

## e2e-down: take the cluster down; also cleans up after a failed or killed e2e-up
e2e-down:
	$(GO) run ./tools/e2e down

## e2e: the upstream Kubernetes NetworkPolicy e2e specs on the real-node cluster (the running one, else one brought up and down), eBPF then iptables; writes E2E.md (NETPOL_FLAGS="--dataplanes iptables" for one)
e2e: deps kube-testenv
	$(GO) run ./tools/e2e netpol $(NETPOL_FLAGS)

## demo: a standalone node with real pods in network namespaces, then teardown
demo: build
	$(GO) run ./tools/demo -bin $(BIN)

## bench: CNI latency vs the reference plugins, the policy dataplanes, Kubernetes IPAM, pod start on the real node vs bridge, then Service translation vs kube-proxy, written to BENCHMARKS.md
bench: deps build kube-testenv
	$(GO) run ./tools/cnibench -bin $(BIN) -out BENCHMARKS.md
	$(GO) run ./tools/policybench -bin $(BIN) -out BENCHMARKS.md
	$(GO) run ./tools/kubebench -bin $(BIN) -out BENCHMARKS.md
	$(GO) run ./tools/podstartbench -bin $(BIN) -out BENCHMARKS.md
	$(GO) run ./tools/svcbench -bin $(BIN) -out BENCHMARKS.md

clean:
	rm -rf $(BIN)
