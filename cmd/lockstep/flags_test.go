package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"lockstep.dev/lockstep/agent/api"
)

// flagUse is one subcommand's definition of a flag.
type flagUse struct {
	command string // "lockstep maps list"
	flag    *pflag.Flag
}

// flagUses walks the command tree and returns every visible flag each
// command defines (its own and its persistent ones, not inherited ones),
// by name. Deprecated aliases and -h/--help are left out.
func flagUses(root *cobra.Command) map[string][]flagUse {
	uses := map[string][]flagUse{}
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		seen := map[string]bool{}
		add := func(f *pflag.Flag) {
			if seen[f.Name] || f.Hidden || f.Deprecated != "" || f.Name == "help" {
				return
			}
			seen[f.Name] = true
			uses[f.Name] = append(uses[f.Name], flagUse{cmd.CommandPath(), f})
		}
		cmd.LocalNonPersistentFlags().VisitAll(add)
		cmd.PersistentFlags().VisitAll(add)
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(root)
	return uses
}

// differentDefaults are flags whose default may differ between
// subcommands, each with the reason; every other flag has one default.
var differentDefaults = map[string]string{
	// The agent and the operator run side by side on a node: each
	// serves on its own port.
	"metrics-addr": "the agent's and the operator's ports",
	// A real agent has no pool unless given one (Kubernetes mode takes
	// them from its NodeIPAM); probe's throwaway node needs one.
	"pool-cidr": "the agent has none, probe's throwaway node one",
	// probe connects over one family; explain defaults to the family
	// of the address it is given.
	"family": "probe's IPv4, explain's the address's own",
}

// flagProblems returns what makes uses disagree: one name with two
// shorthands, help texts or defaults; two names with one help text (one
// meaning spelt twice); and an --output flag that does not offer yaml.
func flagProblems(uses map[string][]flagUse) []string {
	var problems []string
	names := make([]string, 0, len(uses))
	for n := range uses {
		names = append(names, n)
	}
	slices.Sort(names)
	byUsage := map[string]string{}
	for _, name := range names {
		first := uses[name][0]
		for _, u := range uses[name][1:] {
			if u.flag.Shorthand != first.flag.Shorthand {
				problems = append(problems, fmt.Sprintf("--%s: shorthand %q in %s, %q in %s", name, first.flag.Shorthand, first.command, u.flag.Shorthand, u.command))
			}
			if u.flag.Usage != first.flag.Usage {
				problems = append(problems, fmt.Sprintf("--%s: help %q in %s, %q in %s; register it with one helper in flags.go", name, first.flag.Usage, first.command, u.flag.Usage, u.command))
			}
			if _, ok := differentDefaults[name]; !ok && u.flag.DefValue != first.flag.DefValue {
				problems = append(problems, fmt.Sprintf("--%s: default %q in %s, %q in %s", name, first.flag.DefValue, first.command, u.flag.DefValue, u.command))
			}
		}
		if other, ok := byUsage[first.flag.Usage]; ok {
			problems = append(problems, fmt.Sprintf("--%s and --%s have the same help %q: one meaning, two spellings", other, name, first.flag.Usage))
		}
		byUsage[first.flag.Usage] = name
		if name == "output" {
			for _, u := range uses[name] {
				if !strings.Contains(u.flag.Usage, "yaml") {
					problems = append(problems, fmt.Sprintf("--output of %s does not offer yaml: %q", u.command, u.flag.Usage))
				}
			}
		}
	}
	return problems
}

// TestFlagsAgree walks lockstep's command tree: a flag name means one
// thing, with one shorthand, help text and default, wherever it appears,
// and every --output offers yaml.
func TestFlagsAgree(t *testing.T) {
	uses := flagUses(newRootCmd())
	if len(uses["output"]) < 5 || len(uses["bpf-root"]) < 3 || len(uses["socket"]) < 3 {
		t.Fatalf("the walk found --output in %d, --bpf-root in %d and --socket in %d commands; it misses commands", len(uses["output"]), len(uses["bpf-root"]), len(uses["socket"]))
	}
	for _, p := range flagProblems(uses) {
		t.Error(p)
	}
}

// TestFlagProblems shows the check catches each kind of disagreement.
func TestFlagProblems(t *testing.T) {
	flag := func(name, short, usage, def string) *pflag.Flag {
		return &pflag.Flag{Name: name, Shorthand: short, Usage: usage, DefValue: def}
	}
	ok := map[string][]flagUse{
		"output": {{"a", flag("output", "o", "table, json or yaml", "table")}, {"b", flag("output", "o", "table, json or yaml", "table")}},
		"socket": {{"a", flag("socket", "", "the socket", "/s")}},
	}
	tests := []struct {
		name string
		add  flagUse
		want string
	}{
		{"another shorthand", flagUse{"c", flag("output", "O", "table, json or yaml", "table")}, `--output: shorthand "o" in a, "O" in c`},
		{"another help", flagUse{"c", flag("socket", "", "where the agent listens", "/s")}, `--socket: help "the socket" in a, "where the agent listens" in c`},
		{"another default", flagUse{"c", flag("socket", "", "the socket", "/t")}, `--socket: default "/s" in a, "/t" in c`},
		{"no yaml", flagUse{"c", flag("output", "o", "table or json", "table")}, "--output of c does not offer yaml"},
		{"one meaning spelt twice", flagUse{"c", flag("agent-socket", "", "the socket", "/s")}, "--agent-socket and --socket have the same help"},
	}
	if got := flagProblems(ok); len(got) > 0 {
		t.Fatalf("problems %q in agreeing flags", got)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uses := map[string][]flagUse{}
			for k, v := range ok {
				uses[k] = slices.Clone(v)
			}
			uses[tt.add.flag.Name] = append(uses[tt.add.flag.Name], tt.add)
			got := flagProblems(uses)
			if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, tt.want) }) {
				t.Errorf("problems %q, want one containing %q", got, tt.want)
			}
		})
	}
}

// TestBadOutputOneWording runs every subcommand with an --output flag with
// -o xml, in process: each refuses it with the same words before it does
// anything else (none reaches an agent, a map or a namespace).
func TestBadOutputOneWording(t *testing.T) {
	const want = `parse --output "xml": want table, json or yaml`
	n := 0
	for _, u := range flagUses(newRootCmd())["output"] {
		path := strings.Fields(u.command)[1:]
		n++
		var err error
		for _, extra := range [][]string{nil, {"ARG"}} { // commands that take an argument get one
			root := newRootCmd()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append(append(slices.Clone(path), extra...), "-o", "xml"))
			if err = root.Execute(); err != nil && err.Error() == want {
				break
			}
		}
		if err == nil || err.Error() != want {
			t.Errorf("%s -o xml: %v, want %q", u.command, err, want)
		}
	}
	if n == 0 {
		t.Fatal("no subcommand has --output")
	}
}

// TestDeprecatedAliases: the old spellings still set the value of the
// new ones, so manifests and scripts written for them keep working.
func TestDeprecatedAliases(t *testing.T) {
	for _, tc := range []struct {
		command  string
		old, now string
		value    string
	}{
		{"install-cni", "bin-dir", "cni-bin-dir", "/x/bin"},
		{"install-cni", "conf-dir", "cni-conf-dir", "/x/net.d"},
		{"install-cni", "conf-name", "cni-conf-name", "99-x.conflist"},
		{"probe", "timeout", "connect-timeout", "3s"},
	} {
		cmd, _, err := newRootCmd().Find([]string{tc.command})
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags([]string{"--" + tc.old, tc.value}); err != nil {
			if tc.command == "probe" && strings.Contains(err.Error(), "unknown flag") {
				continue // probe_other.go: probe has no flags off Linux
			}
			t.Fatalf("%s --%s %s: %v", tc.command, tc.old, tc.value, err)
		}
		if got := cmd.Flags().Lookup(tc.now).Value.String(); got != tc.value {
			t.Errorf("%s --%s %s: --%s is %q, want %q", tc.command, tc.old, tc.value, tc.now, got, tc.value)
		}
	}
}

// TestYAMLHasTheJSONFields: -o yaml says what -o json says, under the same
// field names (the json tags, not Go's field names), one value or a stream.
func TestYAMLHasTheJSONFields(t *testing.T) {
	v := api.StatusResponse{
		Pools:     []api.PoolStatus{{Name: "default-v4", CIDR: netip.MustParsePrefix("10.244.0.0/24"), Size: 254, Used: 3, Free: 251}},
		Dataplane: &api.DataplaneStatus{Name: "ebpf", LastApplyError: "compile: too many rules"}, // a YAML library of its own would write "lastapplyerror"
	}
	decode := func(output string, streamed bool) map[string]any {
		var b bytes.Buffer
		write := writeStructured
		if streamed {
			write = writeStreamed
		}
		if err := write(&b, output, v); err != nil {
			t.Fatal(err)
		}
		if streamed && output == outputYAML && !strings.HasPrefix(b.String(), "---\n") {
			t.Errorf("a streamed YAML document starts %q, want ---", b.String())
		}
		var m map[string]any
		if err := yaml.Unmarshal(b.Bytes(), &m); err != nil { // YAML reads JSON too
			t.Fatalf("-o %s: %v\n%s", output, err, b.String())
		}
		return m
	}
	want := decode(outputJSON, false)
	if dp, _ := want["dataplane"].(map[string]any); dp["lastApplyError"] == nil {
		t.Fatalf("-o json = %v, want the dataplane's lastApplyError", want)
	}
	for _, streamed := range []bool{false, true} {
		if got := decode(outputYAML, streamed); !reflect.DeepEqual(got, want) {
			t.Errorf("-o yaml (streamed %v) = %v,\nwant the JSON's %v", streamed, got, want)
		}
	}
}
