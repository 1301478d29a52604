module lockstep.dev/lockstep

go 1.26.8

require (
	github.com/cilium/ebpf v0.21.0
	github.com/containernetworking/cni v1.3.1
	github.com/containernetworking/plugins v1.7.1
	github.com/fsnotify/fsnotify v1.10.1
	github.com/hashicorp/go-memdb v1.3.5
	github.com/spf13/cobra v1.10.1
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	go.etcd.io/bbolt v1.4.3
	go.yaml.in/yaml/v3 v3.0.3
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/hashicorp/go-immutable-radix v1.3.1 // indirect
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/stretchr/testify v1.12.0 // indirect
	go.opentelemetry.io/otel v1.29.0 // indirect
	go.opentelemetry.io/otel/trace v1.29.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
