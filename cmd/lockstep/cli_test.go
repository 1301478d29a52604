//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// run runs the built binary (through name, a path or symlink to it).
func run(t *testing.T, name string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestInstallCNIThroughBinary installs into temporary directories twice and
// then runs the installed plugin through the installed symlink.
func TestInstallCNIThroughBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(builtBinary(t), "lockstep")
	root := t.TempDir()
	args := []string{"install-cni", "--cni-bin-dir", filepath.Join(root, "bin"), "--cni-conf-dir", filepath.Join(root, "net.d")}

	out, err := run(t, bin, nil, args...)
	if err != nil || strings.Count(out, "installed ") != 3 {
		t.Fatalf("first install-cni: %v\n%s", err, out)
	}
	out, err = run(t, bin, nil, args...)
	if err != nil || !strings.Contains(out, "nothing changed") {
		t.Fatalf("second install-cni: %v\n%s", err, out)
	}
	out, err = run(t, filepath.Join(root, "bin", "lockstep-cni"), []string{"CNI_COMMAND=VERSION"})
	if err != nil || !strings.Contains(out, `"1.1.0"`) {
		t.Fatalf("installed lockstep-cni VERSION: %v\n%s", err, out)
	}
	conf, err := os.ReadFile(filepath.Join(root, "net.d", "10-lockstep.conflist"))
	if err != nil || !strings.Contains(string(conf), `"type": "lockstep-cni"`) || !strings.Contains(string(conf), `"cniVersion": "1.0.0"`) {
		t.Fatalf("installed config: %v\n%s", err, conf)
	}
	// STATUS and GC need a 1.1.0 list: asking for it rewrites the config.
	out, err = run(t, bin, nil, append(args, "--cni-version", "1.1.0")...)
	if err != nil || !strings.Contains(out, "installed "+filepath.Join(root, "net.d", "10-lockstep.conflist")) {
		t.Fatalf("install-cni --cni-version 1.1.0: %v\n%s", err, out)
	}
	if conf, _ := os.ReadFile(filepath.Join(root, "net.d", "10-lockstep.conflist")); !strings.Contains(string(conf), `"cniVersion": "1.1.0"`) {
		t.Fatalf("config after --cni-version 1.1.0:\n%s", conf)
	}
}

// TestCLIErrors covers errors raised before the agent does anything; the
// agent is never started here, in the machine's own namespace.
func TestCLIErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(builtBinary(t), "lockstep")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"version"}, "lockstep "},
		{[]string{"agent", "--node-name", "", "--state-dir", t.TempDir()}, "needs --node-name (or NODE_NAME)"},
		{[]string{"agent", "--node-name", "n", "--pool-cidr", "10.244.0.0/24", "--state-dir", t.TempDir()}, "--pool-cidr is for --standalone"},
		{[]string{"agent", "--node-name", "n", "--kubeconfig", "/nonexistent/kubeconfig", "--state-dir", t.TempDir()}, "load --kubeconfig /nonexistent/kubeconfig"},
		{[]string{"agent", "--standalone", "--pool-cidr", "10.244.0.0/33"}, "want a CIDR such as 10.244.0.0/24"},
		{[]string{"agent", "--standalone"}, "no --pool-cidr given"},
		{[]string{"agent", "--standalone", "--pool-cidr", "10.244.0.0/24", "--non-masquerade-cidr", "10.0.0.1/8"}, "did you mean 10.0.0.0/8"},
		{[]string{"agent", "--standalone", "--pool-cidr", "10.244.0.0/24", "--cluster-cidr", "10.0.0.0"}, "--cluster-cidr \"10.0.0.0\""},
		{[]string{"agent", "--standalone", "--pool-cidr", "10.244.0.0/24", "--service-translation=maybe"}, `invalid argument "maybe" for "--service-translation"`},
		{[]string{"agent", "--standalone", "--pool-cidr", "10.244.0.0/24", "--nodeport-addresses", "192.168.0.0/33"}, `--nodeport-addresses "192.168.0.0/33"`},
		{[]string{"agent", "--standalone", "--pool-cidr", "10.244.0.0/24", "--nodeport-addresses", "primary,10.0.0.0/8"}, "primary goes alone"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"install-cni", "--cni-version", "1.2.0", "--cni-bin-dir", t.TempDir(), "--cni-conf-dir", t.TempDir()}, "choose one of 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"},
	}
	for _, tc := range tests {
		out, err := run(t, bin, nil, tc.args...)
		wantErr := tc.args[0] != "version"
		if (err != nil) != wantErr || !strings.Contains(out, tc.want) {
			t.Errorf("lockstep %s: err %v, output %q; want %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}
