package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestRelay(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestOK"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"quiet log\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestOK","Elapsed":0.2}`,
		`{"Action":"run","Package":"p","Test":"TestSlow"}`,
		`{"Action":"output","Package":"p","Test":"TestSlow/sub","Output":"slow log\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestSlow/sub","Elapsed":40.5}`,
		`{"Action":"pass","Package":"p","Test":"TestSlow","Elapsed":45.26}`,
		`{"Action":"run","Package":"p","Test":"TestBad"}`,
		`{"Action":"output","Package":"p","Test":"TestBad","Output":"    bad_test.go:9: it broke\n"}`,
		`{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestBad"}`,
		`{"Action":"run","Package":"p","Test":"TestGone/sub"}`,
		`{"Action":"output","Package":"p","Test":"TestGone/sub","Output":"=== RUN   TestGone/sub\n"}`,
		`{"Action":"output","Package":"p","Test":"TestGone/sub","Output":"    gone_test.go:3: ipset is missing\n"}`,
		`{"Action":"output","Package":"p","Test":"TestGone/sub","Output":"--- SKIP: TestGone/sub (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestGone/sub"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}`,
		`{"Action":"output","Package":"q","Output":"PASS\n"}`,
		`# p [p.test]`,
		`{"Action":"skip","Package":"q"}`,
		`{"Action":"build-output","ImportPath":"r","Output":"r/x.go:1: syntax error\n"}`,
		`{"Action":"run","Package":"s","Test":"TestHangs"}`,
		`{"Action":"output","Package":"s","Test":"TestHangs","Output":"waiting for the agent\n"}`,
	}, "\n")
	var out bytes.Buffer
	skipped, err := relay(strings.NewReader(stream), &out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"p TestGone/sub: gone_test.go:3: ipset is missing"}; !slices.Equal(skipped, want) {
		t.Errorf("skipped = %q, want %q (a package without tests is no skipped test)", skipped, want)
	}
	got := out.String()
	for _, want := range []string{"it broke", "--- FAIL: TestBad", "FAIL\tp\t0.01s", "# p [p.test]", "syntax error", "waiting for the agent", "--- PASS: p TestSlow (45.3s)\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet log") || strings.Contains(got, "slow log") || strings.Contains(got, "PASS\n") {
		t.Errorf("output has a passing test's log:\n%s", got)
	}
	if strings.Count(got, "--- PASS") != 1 {
		t.Errorf("output has a pass other than the slow top-level test's:\n%s", got)
	}
}
