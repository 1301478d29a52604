package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/api"
)

// runMainEnv makes the test binary act as the plugin, so tests can run Main
// exactly as a runtime would: environment, stdin, stdout, exit status.
const runMainEnv = "LOCKSTEP_TEST_RUN_PLUGIN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		Main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// execPlugin runs Main in a child process with the CNI environment env.
func execPlugin(t *testing.T, env []string, stdin []byte) (stdout, stderr string, exitCode int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append([]string{runMainEnv + "=1", "PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		exitCode = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("run plugin: %v", err)
	}
	return out.String(), errOut.String(), exitCode
}

func TestMainVersion(t *testing.T) {
	stdout, _, code := execPlugin(t, []string{"CNI_COMMAND=VERSION"}, nil)
	var info struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &info) != nil {
		t.Fatalf("VERSION exit %d, stdout %q", code, stdout)
	}
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		if !slices.Contains(info.SupportedVersions, v) {
			t.Errorf("VERSION lists %v, missing %s", info.SupportedVersions, v)
		}
	}
}

func TestMainAbout(t *testing.T) {
	_, stderr, code := execPlugin(t, nil, nil)
	if code != 0 || !strings.Contains(stderr, "lockstep-cni ") {
		t.Fatalf("bare run exit %d, stderr %q; want the about line", code, stderr)
	}
}

// TestMainReportsErrorsAsCNI: an ADD rejected before touching anything
// prints a CNI error on stdout and exits non-zero.
func TestMainReportsErrorsAsCNI(t *testing.T) {
	env := []string{
		"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + testContainer, "CNI_NETNS=" + testNetns,
		"CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin", "CNI_ARGS=K8S_POD_NAME=Bad_Name",
	}
	stdout, _, code := execPlugin(t, env, []byte(`{"cniVersion":"1.1.0","name":"pods","type":"lockstep"}`))
	var cniErr struct {
		Code uint   `json:"code"`
		Msg  string `json:"msg"`
	}
	if code == 0 || json.Unmarshal([]byte(stdout), &cniErr) != nil {
		t.Fatalf("ADD exit %d, stdout %q; want a CNI error", code, stdout)
	}
	if cniErr.Code != 4 || !strings.Contains(cniErr.Msg, "K8S_POD_NAME") {
		t.Fatalf("ADD error = %+v, want code 4 naming K8S_POD_NAME", cniErr)
	}
}

func TestMainStatus(t *testing.T) {
	h := newHarness(t)
	env := []string{"CNI_COMMAND=STATUS", "CNI_PATH=/opt/cni/bin"}

	h.agent.statusResp = api.StatusResponse{Pools: []api.PoolStatus{pool("v4", "10.244.0.0/24", 3, false)}}
	if stdout, stderr, code := execPlugin(t, env, h.conf("1.1.0", "")); code != 0 {
		t.Fatalf("STATUS exit %d, stdout %q, stderr %q; want available", code, stdout, stderr)
	}

	h.agent.statusResp = api.StatusResponse{Pools: []api.PoolStatus{pool("v4", "10.244.0.0/24", 0, false)}}
	stdout, _, code := execPlugin(t, env, h.conf("1.1.0", ""))
	if code == 0 || !strings.Contains(stdout, `"code": 50`) || !strings.Contains(stdout, "no free IPv4 address") {
		t.Fatalf("STATUS exit %d, stdout %q; want code 50", code, stdout)
	}
}
