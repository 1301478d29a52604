#!/usr/bin/env bash
# Builds the Kubernetes binaries lockstep's tests run, from the Kubernetes
# release pinned in go.mod beside this script, and prints the directory that
# holds them: kube-apiserver and kubectl (test/kubetest), and the rest of
# a real node and its control plane (test/realnode): kubelet, kube-proxy,
# kube-controller-manager, kube-scheduler, the upstream test server
# agnhost, the cluster DNS CoreDNS (from the module tools/coredns), and the
# upstream end-to-end suite e2e.test (`go test -c k8s.io/kubernetes/test/e2e`,
# which `make e2e` runs the NetworkPolicy specs of).
#
# The binaries live outside the repository, in
#   ${LOCKSTEP_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockstep/kube-testenv/<version>-<hash>}
# (the hash is of both modules' go.mod and go.sum, e2e.go and this script)
# and are built only when missing: a build takes about seventeen minutes on
# two shared cores with a cold Go build cache (measured 16.5: the seven
# Kubernetes commands 8, then e2e.test and CoreDNS 8.5), seconds with a warm
# one; a call that finds
# them built returns at once. Concurrent callers (parallel test
# packages) wait on one lock and build once. Progress goes to stderr; stdout
# is only the directory.
#
#   tools/kube-testenv/build.sh          # build if needed, print the dir
#   tools/kube-testenv/build.sh -check   # print the dir, exit 1 if not built
set -euo pipefail

# Everything is in main, which bash reads whole before running it: editing
# this file during a build (a pull, a checkout) must not change what the
# running build does next.
main() {
	here=$(cd "$(dirname "$0")" && pwd)
	version=$(sed -n 's/^\(require\)\{0,1\}[[:space:]]*k8s\.io\/kubernetes \(v[0-9][^ ]*\).*/\2/p' "$here/go.mod")
	if [ -z "$version" ]; then
		echo "kube-testenv: no k8s.io/kubernetes requirement in $here/go.mod" >&2
		exit 1
	fi
	dns="$here/../coredns"
	stamp=$(cat "$here/go.mod" "$here/go.sum" "$here/e2e.go" "$here/build.sh" "$dns/go.mod" "$dns/go.sum" | sha256sum | cut -d' ' -f1)
	# One directory per content of this module: checkouts of different
	# commits (worktrees, CI beside a developer) never rebuild each
	# other's binaries.
	cache=${LOCKSTEP_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockstep/kube-testenv/$version-${stamp:0:12}}
	bins=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy agnhost coredns e2e.test)
	pkgs=()
	for b in "${bins[@]}"; do
		case $b in
		agnhost) pkgs+=(k8s.io/kubernetes/test/images/agnhost) ;;
		coredns | e2e.test) ;; # below: its own module; a test binary
		*) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
		esac
	done

	built() {
		for b in "${bins[@]}"; do
			[ -x "$cache/$b" ] || return 1
		done
		[ "$(cat "$cache/stamp" 2>/dev/null)" = "$stamp" ]
	}

	if built; then
		echo "$cache"
		exit 0
	fi
	if [ "${1:-}" = -check ]; then
		echo "$cache"
		exit 1
	fi

	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if built; then # another caller built them while we waited
		echo "$cache"
		exit 0
	fi
	rm -rf "$cache"/.build.* # left by a build that was killed; we hold the lock

	# Kubernetes' own build (hack/lib/version.sh) stamps the release with these;
	# without them /version and `kubectl version` report v0.0.0-master.
	IFS=. read -r major minor _ <<<"${version#v}"
	ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	done

	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"; [ -z "${ticker:-}" ] || kill "$ticker" 2>/dev/null || true' EXIT
	echo "kube-testenv: building ${bins[*]} $version into $cache" >&2
	echo "kube-testenv: about 17 minutes on 2 cores with a cold Go build cache, seconds with a warm one" >&2
	start=$SECONDS
	# The ticker's sleep must not hold stdout, stderr or the lock open after
	# the ticker is killed: a caller reading our output would wait for it.
	(while sleep 30 >/dev/null 2>&1 9>&-; do echo "kube-testenv: still building ($((SECONDS - start))s)" >&2; done) 9>&- &
	ticker=$!
	(
		cd "$here"
		GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
		# The suite is a test binary; e2e.go makes go.mod hold what its
		# test-only imports need.
		echo "kube-testenv: building e2e.test ($((SECONDS - start))s so far)" >&2
		GOWORK=off CGO_ENABLED=0 go test -c -trimpath -ldflags "$ldflags" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e
	)
	(
		cd "$dns"
		GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/coredns" github.com/coredns/coredns
	)
	kill "$ticker" 2>/dev/null || true
	ticker=
	for b in "${bins[@]}"; do
		mv -f "$tmp/$b" "$cache/"
	done
	echo "$stamp" >"$cache/stamp"
	echo "kube-testenv: built in $((SECONDS - start))s" >&2
	echo "$cache"
}

main "$@"
