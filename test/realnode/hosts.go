//go:build linux

package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// binaries are the programs a cluster runs, found before anything starts.
type binaries struct {
	// kube is the directory of the Kubernetes binaries
	// (tools/kube-testenv/build.sh).
	kube string
	// init is the harness binary that runs RunInit (`e2e init`).
	init                  string
	etcd, containerd, ctr string
	// cniPlugins is where the reference CNI plugins are (Debian's
	// containernetworking-plugins): loopback is needed by containerd,
	// bridge and host-local by the pod-start benchmark.
	cniPlugins string
}

func (b binaries) kubeBin(name string) string { return filepath.Join(b.kube, name) }

// controlPlaneSpec is the control plane's init: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, and the relay of the admin
// kubeconfig.
func controlPlaneSpec(l Layout, p *pki, bin binaries) InitSpec {
	h := l.ControlPlane
	logs := h.LogDir()
	step := func(name, path string, args ...string) Step {
		return Step{Name: name, Path: path, Args: args, Log: filepath.Join(logs, name+".log")}
	}
	etcd := step("etcd", bin.etcd,
		"--data-dir="+filepath.Join(h.Dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380",
		"--unsafe-no-fsync", // a test cluster: nothing to keep across crashes
		"--log-level=warn")
	etcd.Env = []string{"ETCD_UNSUPPORTED_ARCH="}
	etcd.Ready = "tcp://127.0.0.1:2379"
	apiserver := step("kube-apiserver", bin.kubeBin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0",
		"--advertise-address="+h.IPv4.String(),
		fmt.Sprintf("--secure-port=%d", APIServerPort),
		"--tls-cert-file="+p.serverCert(),
		"--tls-private-key-file="+p.serverKey(),
		"--client-ca-file="+p.caFile(),
		"--token-auth-file="+p.tokenFile(),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.saPub(),
		"--service-account-signing-key-file="+p.saKey(),
		"--service-cluster-ip-range="+serviceV4+","+serviceV6,
		"--allow-privileged=true",
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=false",
		"--v=1")
	apiserver.Ready = fmt.Sprintf("https://127.0.0.1:%d/readyz", APIServerPort)
	cm := step("kube-controller-manager", bin.kubeBin("kube-controller-manager"),
		"--kubeconfig="+p.kubeconfig("controller-manager"),
		"--authentication-kubeconfig="+p.kubeconfig("controller-manager"),
		"--authorization-kubeconfig="+p.kubeconfig("controller-manager"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+p.saKey(),
		"--root-ca-file="+p.caFile(),
		"--service-cluster-ip-range="+serviceV4+","+serviceV6,
		"--allocate-node-cidrs=false", // lockstep's operator does pod IPAM
		"--bind-address=127.0.0.1",
		"--profiling=false",
		"--v=1")
	sched := step("kube-scheduler", bin.kubeBin("kube-scheduler"),
		"--kubeconfig="+p.kubeconfig("scheduler"),
		"--authentication-kubeconfig="+p.kubeconfig("scheduler"),
		"--authorization-kubeconfig="+p.kubeconfig("scheduler"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--profiling=false",
		"--v=1")
	return InitSpec{
		Hostname:   h.Name,
		Steps:      []Step{etcd, apiserver, cm, sched},
		Relay:      fmt.Sprintf("127.0.0.1:%d", APIServerPort),
		StatusFile: filepath.Join(h.Dir, "status.json"),
	}
}

// Directories of a node's own file system, under its Dir.
func overlayDirs(h Host, top string) (upper, work string) {
	return filepath.Join(h.Dir, "fs", top, "upper"), filepath.Join(h.Dir, "fs", top, "work")
}

// overlaid are the machine directories a node sees through an overlay of
// its own.
var overlaid = []string{"etc", "var", "opt"}

// nodeSpec is a node's init: its own file system, containerd, the images,
// the kubelet and kube-proxy.
func nodeSpec(l Layout, h Host, bin binaries, images []string) InitSpec {
	mounts := []Mount{
		// The node's own /run: containerd's state, the pod network
		// namespaces, lockstep's socket, xtables.lock.
		{Source: "tmpfs", Target: "/run", Type: "tmpfs", Data: "mode=0755"},
		// A sysfs of the node's network namespace, keeping the machine's
		// cgroup hierarchies, and no bpffs: lockstep mounts one.
		{Source: "/sys/fs/cgroup", Target: "/run/lse2e-cgroup", Bind: true, Mkdir: true},
		{Source: "sysfs", Target: "/sys", Type: "sysfs"},
		{Source: "/run/lse2e-cgroup", Target: "/sys/fs/cgroup", Bind: true},
		{Target: "/run/lse2e-cgroup", Unmount: true},
	}
	for _, top := range overlaid {
		upper, work := overlayDirs(h, top)
		mounts = append(mounts, Mount{Source: "overlay", Target: "/" + top, Type: "overlay",
			Data: fmt.Sprintf("lowerdir=/%s,upperdir=%s,workdir=%s", top, upper, work)})
	}
	// overlayfs cannot be the upper layer of containerd's snapshots.
	mounts = append(mounts, Mount{Source: filepath.Join(h.Dir, "containerd"), Target: "/var/lib/containerd", Bind: true, Mkdir: true})

	logs := h.LogDir()
	steps := []Step{{
		Name: "containerd", Path: bin.containerd, Args: []string{"--config", "/etc/containerd/config.toml"},
		Log: filepath.Join(logs, "containerd.log"), Ready: "/run/containerd/containerd.sock",
	}}
	for _, img := range images {
		steps = append(steps, Step{
			Name: "import " + filepath.Base(img), Path: bin.ctr, Task: true,
			Args: []string{"--namespace", "k8s.io", "images", "import", "--no-unpack=false", img},
			Log:  filepath.Join(logs, "images.log"),
		})
	}
	steps = append(steps,
		Step{
			Name: "kubelet", Path: bin.kubeBin("kubelet"),
			Args: []string{
				"--config=/etc/kubernetes/kubelet.yaml",
				"--kubeconfig=/etc/kubernetes/kubelet.kubeconfig",
				"--hostname-override=" + h.Name,
				"--node-ip=" + h.IPv4.String() + "," + h.IPv6.String(),
				"--v=2",
			},
			Log: filepath.Join(logs, "kubelet.log"),
		},
		Step{
			Name: "kube-proxy", Path: bin.kubeBin("kube-proxy"),
			Args: []string{"--config=/etc/kubernetes/kube-proxy.yaml", "--hostname-override=" + h.Name, "--v=1"},
			Log:  filepath.Join(logs, "kube-proxy.log"),
		},
	)
	return InitSpec{
		Hostname:   h.Name,
		Mounts:     mounts,
		Steps:      steps,
		StatusFile: filepath.Join(h.Dir, "status.json"),
	}
}

// writeNodeFiles writes a node's configuration into the upper layers of its
// overlays, where the node sees it as /etc/... and /opt/...: containerd's
// config, the kubelet's and kube-proxy's configs and kubeconfigs, and the
// reference CNI plugins containerd itself needs.
func writeNodeFiles(l Layout, h Host, p *pki, bin binaries) error {
	for _, top := range overlaid {
		upper, work := overlayDirs(h, top)
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("create %s: %w", d, err)
			}
		}
	}
	etc, _ := overlayDirs(h, "etc")
	opt, _ := overlayDirs(h, "opt")
	files := map[string]string{
		filepath.Join(etc, "containerd", "config.toml"):     containerdConfig,
		filepath.Join(etc, "kubernetes", "kubelet.yaml"):    kubeletConfig(h),
		filepath.Join(etc, "kubernetes", "kube-proxy.yaml"): kubeProxyConfig(h),
	}
	for path, content := range files {
		if err := writeFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for name, id := range map[string]string{"kubelet": "node:" + h.Name, "kube-proxy": "kube-proxy"} {
		if err := p.writeKubeconfig(filepath.Join(etc, "kubernetes", name+".kubeconfig"), id, l.APIServerURL()); err != nil {
			return err
		}
	}
	// kube-proxy reads the kubeconfig its config names.
	cniBin := filepath.Join(opt, "cni", "bin")
	if err := os.MkdirAll(cniBin, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", cniBin, err)
	}
	for _, plugin := range []string{"loopback", "bridge", "host-local", "portmap"} {
		b, err := os.ReadFile(filepath.Join(bin.cniPlugins, plugin))
		if err != nil {
			return fmt.Errorf("copy CNI plugin %s: %w (run make deps: Debian's containernetworking-plugins)", plugin, err)
		}
		if err := writeFile(filepath.Join(cniBin, plugin), b, 0o755); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(h.Dir, "containerd"), 0o711)
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// PauseImage is the sandbox image every node's containerd uses; the harness
// builds and imports it.
const PauseImage = "registry.k8s.io/pause:3.10"

// containerdConfig is containerd 1.6's configuration on every node. This VM
// has no CAP_SYS_RESOURCE, so runc may not lower oom_score_adj:
// restrict_oom_score_adj keeps it from trying.
var containerdConfig = strings.TrimLeft(`
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "`+PauseImage+`"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`, "\n")

// kubeletConfig is a node's KubeletConfiguration: cgroupfs under the node's
// own cgroup root, no swap or cgroup v1 refusals (this VM), no eviction or
// image garbage collection (imported images cannot be pulled again), and
// anonymous access to its API (the test cluster's API server reaches it
// for logs and exec without a client certificate).
func kubeletConfig(h Host) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
address: %s
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
clusterDNS: [%s]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%%"
  imagefs.available: "0%%"
  nodefs.inodesFree: "0%%"
maxPods: 110
protectKernelDefaults: false
`, h.IPv4, h.CgroupName(), clusterDNS)
}

// kubeProxyConfig is a node's kube-proxy configuration: iptables mode, and
// conntrack left alone (its sysctls are the machine's, not the node's).
func kubeProxyConfig(h Host) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: /etc/kubernetes/kube-proxy.kubeconfig
clusterCIDR: %s
hostnameOverride: %s
bindAddress: 0.0.0.0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, strings.Join(PodCIDRs, ","), h.Name)
}
