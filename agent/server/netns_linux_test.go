package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"lockstep.dev/lockstep/agent/api"
)

// openFDs counts the descriptors this process holds: the server runs in
// it, so a descriptor it failed to close shows here.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// exchange sends line with files' descriptors attached on conn and reads
// the answer.
func exchange(t *testing.T, conn *net.UnixConn, r *bufio.Reader, line string, files ...*os.File) api.Response {
	t.Helper()
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = syscall.UnixRights(fds...)
	}
	if _, _, err := conn.WriteMsgUnix([]byte(line+"\n"), oob, nil); err != nil {
		t.Fatal(err)
	}
	raw, err := api.ReadLine(r, api.MaxLine)
	if err != nil {
		t.Fatalf("%s: read answer: %v", line, err)
	}
	var resp api.Response
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestPassedDescriptorsAreCheckedAndClosed sends requests with
// descriptors the server must refuse, or accept and not use, and checks
// that it answers with a clear error and keeps none of them.
func TestPassedDescriptorsAreCheckedAndClosed(t *testing.T) {
	conn, err := net.Dial("unix", serve(t, &fakeBackend{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	r := bufio.NewReader(conn)
	// A first exchange, so the server holds the connection's descriptors
	// before counting starts.
	if resp := exchange(t, uc, r, `{"v":"v1","op":"status"}`); resp.Error != nil {
		t.Fatal(resp.Error)
	}

	const add = `{"v":"v1","op":"cni-add","body":{"containerID":"c","ifName":"eth0","netns":"/x"}}`
	tests := []struct {
		name  string
		line  string
		files func(t *testing.T) []*os.File
		code  uint // 0: success
		want  string
	}{
		{"a regular file is not a namespace", add, func(t *testing.T) []*os.File { return []*os.File{tempFile(t)} },
			api.CodeInvalidNetNS, "not a namespace handle"},
		{"the agent's own namespace", add, func(t *testing.T) []*os.File { return []*os.File{open(t, "/proc/thread-self/ns/net")} },
			api.CodeInvalidNetNS, "node's own network namespace"},
		{"a namespace of another kind", add, func(t *testing.T) []*os.File { return []*os.File{open(t, "/proc/self/ns/uts")} },
			api.CodeInvalidNetNS, "not a network namespace"},
		{"ADD without a namespace", add, func(*testing.T) []*os.File { return nil },
			api.CodeInvalidNetNS, "needs the pod's network namespace"},
		{"two descriptors", add, func(t *testing.T) []*os.File { return []*os.File{tempFile(t), tempFile(t)} },
			api.CodeInvalidNetNS, "passed 2 descriptors"},
		{"an operation that takes none", `{"v":"v1","op":"status"}`, func(t *testing.T) []*os.File { return []*os.File{tempFile(t)} },
			api.CodeInvalidNetNS, "takes no descriptor"},
		{"an unknown operation", `{"v":"v1","op":"explode"}`, func(t *testing.T) []*os.File { return []*os.File{tempFile(t)} },
			api.CodeIncompatibleVersion, "no operation"},
		{"pipelined behind another request", `{"v":"v1","op":"status"}` + "\n" + add, func(t *testing.T) []*os.File { return []*os.File{tempFile(t)} },
			api.CodeInvalidNetNS, "only one in flight"},
		{"DEL accepts one and does not need it", `{"v":"v1","op":"cni-del","body":{"containerID":"c","ifName":"eth0"}}`,
			func(t *testing.T) []*os.File { return []*os.File{tempFile(t)} }, 0, `"hostIfName":"lsx"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := openFDs(t)
			files := tt.files(t)
			resp := exchange(t, uc, r, tt.line, files...)
			if strings.Contains(tt.line, "\n") {
				// The pipelined request got its own answer first.
				raw, err := api.ReadLine(r, api.MaxLine)
				if err != nil {
					t.Fatal(err)
				}
				var second api.Response
				_ = json.Unmarshal(raw, &second)
				resp = firstError(resp, second)
			}
			closeAll(files)
			got, text := uint(0), ""
			if resp.Error != nil {
				got, text = resp.Error.Code, resp.Error.Error()
			} else {
				text = string(resp.Body)
			}
			if got != tt.code || !strings.Contains(text, tt.want) {
				t.Errorf("answer code %d %q, want code %d containing %q", got, text, tt.code, tt.want)
			}
			if after := openFDs(t); after != before {
				t.Errorf("the process holds %d descriptors after the request, %d before: the server kept what it was passed", after, before)
			}
		})
	}
}

// firstError returns whichever of a and b carries an error, a first.
func firstError(a, b api.Response) api.Response {
	if a.Error != nil {
		return a
	}
	return b
}

func tempFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "notns")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestClientPassesNetns: the client's CNIAdd passes the file, and a file
// that is not a namespace comes back as the server's refusal.
func TestClientPassesNetns(t *testing.T) {
	c := api.NewClient(serve(t, &fakeBackend{}), 0)
	defer c.Close()
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	f := tempFile(t)
	_, err := c.CNIAdd(context.Background(), api.CNIAddRequest{Attachment: api.Attachment{ContainerID: "c", IfName: "eth0"}}, f)
	f.Close()
	if api.CodeOf(err) != api.CodeInvalidNetNS || !strings.Contains(err.Error(), "not a namespace handle") {
		t.Fatalf("CNIAdd with a regular file: %v, want the server's refusal", err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("the process holds %d descriptors after the request, %d before", after, before)
	}
}
