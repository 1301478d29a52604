// Command image writes lockstep's container images as tarballs that
// `ctr images import`, `kind load image-archive` and `docker load` all take,
// without a Docker engine (internal/ociimage does the writing).
//
//	go run ./tools/image lockstep [-bin bin/lockstep] [-name lockstep] [-tag dev] [-out bin/lockstep-image.tar]
//	go run ./tools/image binary -bin FILE -name NAME [-tag latest] [-path /FILE] [-entrypoint ARGS] [-cmd ARGS] [-env K=V]... [-user U] [-out FILE]
//	go run ./tools/image pause [-bin FILE] [-name registry.k8s.io/pause] [-tag 3.10] [-out bin/pause-image.tar]
//
// lockstep mode is `make image`: the image deploy/ runs (lockstep:dev),
// holding the static lockstep binary at /usr/local/bin/lockstep with its
// lockstep-cni symlink, and everything the iptables dataplane runs:
// xtables-nft-multi and xtables-legacy-multi under every name Debian gives
// them, ipset, the xtables extensions, the shared libraries and the dynamic
// loader they need (read from their ELF headers), /etc/protocols and
// /etc/services. Those come from the build machine's Debian packages (`make
// deps` installs iptables and ipset), and the image's label
// dev.lockstep.image.packages lists each package and version that went in,
// so an image can be rebuilt from the same versions on purpose.
//
// binary mode wraps one static binary (agnhost, a test server) for the
// end-to-end harness. pause mode builds tools/image/pause, a tiny static
// sandbox program, into an image that can stand in for
// registry.k8s.io/pause:3.10.
//
// Images are reproducible: the same inputs give the same digests. Every
// timestamp is the Unix epoch, or SOURCE_DATE_EPOCH when it is set.
package main
