package datapath

// The BPF object is compiled by bpf2go and its output (endpoint_bpfel.go,
// endpoint_bpfel.o) is committed, so `go build` never needs clang. Run
// `go generate ./agent/datapath` after changing bpf/ and commit the result.
//
// -mcpu=v3 lets clang use 32-bit jumps and ALU operations (kernel 5.1+).
// -I/usr/include/x86_64-linux-gnu finds <asm/types.h> for the uapi headers
// on Debian-style multiarch systems without a system include hack.

//go:generate go tool bpf2go -cc clang-16 -cflags "-O2 -mcpu=v3 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel endpoint ../../bpf/endpoint.c
