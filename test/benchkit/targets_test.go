package benchkit

import "testing"

func TestTargetsTable(t *testing.T) {
	got := TargetsTable([]Target{
		{Name: "a ≤ 1 ms", Measured: "0.5 ms", Pass: true},
		{Name: "b ≥ 2", Measured: "1", Pass: false},
	})
	want := "### Targets (1/2 pass)\n\n| target | measured | result |\n|---|---|---|\n" +
		"| a ≤ 1 ms | 0.5 ms | PASS |\n| b ≥ 2 | 1 | **FAIL** |\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
