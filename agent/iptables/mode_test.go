package iptables

import (
	"regexp"
	"testing"
)

func TestHasKubeletHint(t *testing.T) {
	// The regexp hasKubeletHint replaced, kept here as the reference.
	reference := regexp.MustCompile(`(?m)^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY)\b`)
	tests := []struct {
		name string
		save string
		want bool
	}{
		{name: "empty", save: "", want: false},
		{name: "hint chain", save: "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n", want: true},
		{name: "canary chain", save: "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n", want: true},
		{name: "chain name alone on the last line", save: "*mangle\n:KUBE-IPTABLES-HINT", want: true},
		{name: "a longer chain name is another chain", save: ":KUBE-IPTABLES-HINTS - [0:0]\n:KUBE-KUBELET-CANARY_2 - [0:0]\n", want: false},
		{name: "a hyphen ends the name", save: ":KUBE-IPTABLES-HINT-X - [0:0]\n", want: true},
		{name: "a rule jumping to it is not the declaration", save: "-A OUTPUT -j KUBE-IPTABLES-HINT\n", want: false},
		{name: "not at the start of the line", save: " :KUBE-IPTABLES-HINT - [0:0]\n", want: false},
		{name: "other kube chains", save: "*filter\n:KUBE-FORWARD - [0:0]\n-A KUBE-FORWARD -j ACCEPT\nCOMMIT\n", want: false},
		{name: "CRLF line end", save: ":KUBE-KUBELET-CANARY\r\n", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hasKubeletHint([]byte(tt.save)); got != tt.want {
				t.Errorf("hasKubeletHint(%q) = %v, want %v", tt.save, got, tt.want)
			}
			if ref := reference.MatchString(tt.save); ref != tt.want {
				t.Errorf("reference regexp on %q = %v, want %v: the table is wrong", tt.save, ref, tt.want)
			}
		})
	}
}
