package benchkit

import "testing"

func TestMachineTable(t *testing.T) {
	m := Machine{Command: "go run ./tools/x", Date: "d", Kernel: "k", CPUs: "2", Load: "0.1 0.2 0.3", Go: "go", Lockstep: "l", Tree: "t"}
	got := Table(m.Rows([2]string{"extra", "e"}))
	want := "| | |\n|---|---|\n" +
		"| command | `go run ./tools/x` |\n| date | d |\n| kernel | k |\n| CPUs (nproc) | 2 |\n" +
		"| load average at start (1, 5, 15 min) | 0.1 0.2 0.3 |\n| Go | go |\n| lockstep | l |\n" +
		"| source tree (git describe) | t |\n| extra | e |\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
