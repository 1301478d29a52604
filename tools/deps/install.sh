#!/usr/bin/env bash
# Installs the Debian packages lockstep's tests and benchmarks use, only if
# something is missing. Safe to run again.
set -euo pipefail

need=()
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
# iptables and ipset read protocol and service names from netbase's files
# (and make image copies them into the image).
[ -f /etc/protocols ] && [ -f /etc/services ] || need+=(netbase)
# The iptables dataplane: ipset, and both iptables-legacy and iptables-nft
# (Debian's iptables package ships both).
command -v ipset >/dev/null || need+=(ipset)
[ -x /usr/lib/cni/ptp ] && [ -x /usr/lib/cni/portmap ] || need+=(containernetworking-plugins)
# eBPF: clang-16 compiles bpf/ (make generate; CI checks the committed
# objects are current), libbpf-dev has bpf_helpers.h, bpftool inspects maps.
command -v clang-16 >/dev/null || need+=(clang-16)
command -v llvm-strip-16 >/dev/null || need+=(llvm-16)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
command -v bpftool >/dev/null || need+=(bpftool)
# Benchmarks: TCP throughput between pods with policy on and off.
command -v iperf3 >/dev/null || need+=(iperf3)
# The image tests (tools/image) import lockstep's image into a throwaway
# containerd with ctr; runc is containerd's runtime.
command -v containerd >/dev/null && command -v ctr >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
# The real-node cluster (test/realnode): a busybox image for test pods,
# built from Debian's static busybox.
[ -x /bin/busybox ] || need+=(busybox-static)
# Integration tests against a real kube-apiserver (test/kubetest) store
# in etcd; the apiserver itself is built by tools/kube-testenv/build.sh.
command -v etcd >/dev/null || need+=(etcd-server)

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing ${need[*]}; run as root (or apt-get install ${need[*]})" >&2
	exit 1
fi
echo "deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
