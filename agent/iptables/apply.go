package iptables

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"lockstep.dev/lockstep/agent/policy"
)

// Options configure a Dataplane.
type Options struct {
	// Mode selects the iptables tools (see Detect). Required.
	Mode Mode
	// Runner runs the tools; nil means ExecRunner{}.
	Runner Runner
	// DisableIPv6 leaves ip6tables and IPv6 sets alone, for nodes without
	// IPv6. IPv6 traffic of pods is then not filtered at all.
	DisableIPv6 bool
	// TranslateServices makes the dataplane translate Desired.Services
	// itself, in the nat table, for a node without kube-proxy (lockstep's
	// standalone mode). Otherwise kube-proxy translates and the dataplane
	// only refuses connections to frontends without backends.
	TranslateServices bool
	// Timeout bounds each command; 0 means DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds one iptables or ipset command.
const DefaultTimeout = time.Minute

// Dataplane enforces a policy.Desired with iptables and ipset. It
// implements enforcer.Dataplane. Apply, Attach and Detach must not run
// concurrently (the Enforcer serialises them); Stats may be called any time.
type Dataplane struct {
	mode    Mode
	run     Runner
	timeout time.Duration
	r       renderer

	mu       sync.Mutex
	attached map[string]bool
	eps      map[string]*epRender // renders of the endpoints last planned
	applied  *state               // what the tables and sets hold; nil: unknown
	plan     *plan                // what the last successful Apply wanted

	// beforeRules, when set, runs after step 1 (sets) and before step 2
	// (rules) of every Apply: the window of seed 000.
	beforeRules func()

	statsMu sync.Mutex
	stats   Stats
}

// state is what lockstep's sets and chains hold: after a successful Apply
// its plan; after a full read, what the tools reported.
type state struct {
	sets   map[string]*ipSet
	chains [2]map[string][]string
	// nat holds the Service chains of the nat table, by family.
	nat [2]map[string][]string
	// dead counts, per chain, the unreachable rules at its end that
	// prepending new content left (see chainUpdates).
	dead [2]map[string]int
	// read is set for a state read from the tools: chains hold the
	// lockstep chains present (their rules as saved, never compared), and
	// foreign the rules of other chains that jump into them.
	read       bool
	foreign    [2][]string
	natForeign [2][]string
}

// New returns a Dataplane for o. It runs nothing: the first Apply reads
// the current state and reconciles it.
func New(o Options) (*Dataplane, error) {
	if !o.Mode.valid() {
		return nil, fmt.Errorf("create iptables dataplane: %w %d", ErrUnknownMode, o.Mode)
	}
	if o.Runner == nil {
		o.Runner = ExecRunner{}
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	fams := []Family{IPv4, IPv6}
	if o.DisableIPv6 {
		fams = fams[:1]
	}
	return &Dataplane{
		mode:     o.Mode,
		run:      o.Runner,
		timeout:  o.Timeout,
		r:        renderer{mode: o.Mode, fams: fams, translate: o.TranslateServices},
		attached: map[string]bool{},
		stats:    Stats{Mode: o.Mode},
	}, nil
}

// Attach records hostIf as an endpoint Apply may enforce. Nothing is
// written until Apply: the CNI ADD path applies before the pod's
// containers start. It fails with ErrBadIfName for a name lockstep cannot
// write into rules verbatim. It is idempotent.
func (d *Dataplane) Attach(hostIf string) error {
	if err := checkIfName(hostIf); err != nil {
		return fmt.Errorf("attach to %s: %w", hostIf, err)
	}
	d.mu.Lock()
	d.attached[hostIf] = true
	d.mu.Unlock()
	return nil
}

// Detach forgets hostIf. Its chains go with the next Apply that lacks it
// (the Enforcer applies that state before it detaches).
func (d *Dataplane) Detach(hostIf string) error {
	d.mu.Lock()
	delete(d.attached, hostIf)
	d.mu.Unlock()
	return nil
}

// Invalidate forgets what the dataplane believes is applied, so the next
// Apply reads the tables and sets back and repairs any drift (rules or
// sets changed behind lockstep's back). A periodic resync should call it
// before applying.
func (d *Dataplane) Invalidate() {
	d.mu.Lock()
	d.applied = nil
	d.mu.Unlock()
}

// Apply makes want the enforced state in three steps, each one command
// per family (or one ipset restore):
//
//  1. create the sets want references and update their members;
//  2. rewrite the chains and jumps that changed, in one iptables-restore
//     --noflush per family: rules now reference only sets that exist. A
//     family whose nat and filter tables both change gets three commits,
//     nat, filter, nat (see doc.go, "Services: the order of commits");
//  3. destroy the sets no rule references any more, and take out of the
//     sets of frontends without backends those that have some now (they
//     join those sets in step 1).
//
// A set is therefore destroyed only once the commit that removed its last
// reference is in force (seed 000). Apply diffs against the state it last
// applied; an error forgets that state, and the next Apply reads the
// tables and sets back and reconciles them whole.
//
// Each family's rules change atomically, but a set's members change just
// before the rules do: for a few milliseconds the old rules may see new
// members. Apply keeps references to want; the caller must not modify it
// afterwards (passing the same *policy.EndpointPolicy for an unchanged
// endpoint skips comparing it).
func (d *Dataplane) Apply(want *policy.Desired) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	start := time.Now()
	full := d.applied == nil
	err := d.apply(want)
	d.statsMu.Lock()
	d.stats.Applies++
	if full {
		d.stats.FullReconciles++
	}
	if err != nil {
		d.stats.Failures++
	} else {
		d.stats.LastApplyEnd = time.Now()
		d.stats.LastApply = d.stats.LastApplyEnd.Sub(start)
		d.updateCounts()
	}
	d.statsMu.Unlock()
	return err
}

// updateCounts records the sizes of the applied state. Called with
// d.statsMu held.
func (d *Dataplane) updateCounts() {
	d.stats.Sets, d.stats.SetEntries, d.stats.Chains, d.stats.Rules = d.applied.counts()
	d.stats.DeadRules = d.applied.deadRules()
}

// Compact flushes and refills every chain that holds unreachable rules
// (see chainUpdates), one iptables-restore per family, with the content
// the last Apply put in force: no read-back, no set touched, no other
// chain rewritten. The agent calls it once the dataplane has been idle,
// so that iptables-save shows only live rules. After an error the next
// Apply reads the tables back and reconciles them.
func (d *Dataplane) Compact() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, p := d.applied, d.plan
	if cur == nil || p == nil || cur.deadRules() == 0 {
		return nil
	}
	d.applied = nil
	next := &state{sets: cur.sets, nat: cur.nat}
	var payloads [2][]byte
	for _, f := range d.r.fams {
		payloads[f.index()], next.chains[f.index()], next.dead[f.index()] = chainUpdates(cur, p, f, false)
	}
	if err := d.restoreFamilies(payloads); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	d.applied = next
	d.statsMu.Lock()
	d.updateCounts()
	d.statsMu.Unlock()
	return nil
}

func (d *Dataplane) apply(want *policy.Desired) error {
	var missing []string
	for name := range want.Endpoints {
		if !d.attached[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("apply policy: %w: %s (call Attach first)", ErrNotAttached, strings.Join(missing, ", "))
	}
	p, eps, err := d.r.render(want, d.eps)
	if err != nil {
		return fmt.Errorf("apply policy: %w", err)
	}
	d.eps = eps
	cur := d.applied
	if cur == nil {
		if cur, err = d.read(); err != nil {
			return err
		}
	}
	// From here on an error leaves the tables in a state only a fresh read
	// can tell.
	d.applied = nil
	var prev map[policy.ServiceFrontend]*policy.ServiceEntry
	if !cur.read && d.plan != nil {
		prev = d.plan.services
	}
	next := &state{}
	var payloads [2][]byte
	var refuse []policy.ServiceFrontend
	for _, f := range d.r.fams {
		i := f.index()
		var filter []byte
		filter, next.chains[i], next.dead[i] = chainUpdates(cur, p, f, d.mode == ModeNFT)
		var natLines [2][]string // before and after the filter commit
		switch {
		case cur.read:
			natLines[1], next.nat[i] = natUpdates(cur.nat[i], p.nat[i], true, cur.natForeign[i])
		case filter != nil && d.r.translate:
			mid, empty := d.r.shrinkNAT(f, cur.nat[i], p.nat[i], prev, want.Services)
			refuse = append(refuse, empty...)
			var between map[string][]string
			natLines[0], between = natUpdates(cur.nat[i], mid, false, nil)
			natLines[1], next.nat[i] = natUpdates(between, p.nat[i], false, nil)
		default:
			natLines[1], next.nat[i] = natUpdates(cur.nat[i], p.nat[i], false, nil)
		}
		payloads[i] = slices.Concat(natBlock(natLines[0]), filter, natBlock(natLines[1]))
		if len(payloads[i]) == 0 {
			payloads[i] = nil
		}
	}
	// Frontends without backends are added to their set before the
	// commits and deleted after them: the set holds every frontend that
	// the old state, the new one or any commit in between leaves without
	// translation.
	step1 := refusing(d.mode, cur.sets, p.sets, refuse)
	if batch := setUpdates(cur.sets, step1); len(batch) > 0 {
		if err := d.ipsetRestore(batch); err != nil {
			return fmt.Errorf("create and update ipsets: %w", err)
		}
	}
	if d.beforeRules != nil {
		d.beforeRules()
	}
	next.sets = maps.Clone(step1)
	if err := d.restoreFamilies(payloads); err != nil {
		return err
	}
	// The rules in force, dead ones included, reference only p's sets.
	// Sets to destroy stay in the state as unknown until a destroy of them
	// succeeds.
	var gone []string
	for name, s := range cur.sets {
		if _, ok := p.sets[name]; !ok {
			gone = append(gone, name)
			next.sets[name] = &ipSet{family: s.family, net: s.net, ipPort: s.ipPort, unknown: true}
		}
	}
	d.applied, d.plan = next, p
	var b strings.Builder
	var shrunk []string
	for _, name := range sortedKeys(step1) {
		if s, want := step1[name], p.sets[name]; s.ipPort && want != nil && s != want && len(s.frontends) > len(want.frontends) {
			writeFrontendUpdates(&b, name, s, want)
			shrunk = append(shrunk, name)
		}
	}
	slices.Sort(gone)
	for _, name := range gone {
		b.WriteString("destroy " + name + "\n")
	}
	if b.Len() > 0 {
		if err := d.ipsetRestore([]byte(b.String())); err != nil {
			return fmt.Errorf("destroy unreferenced ipsets: %w", err)
		}
		for _, name := range gone {
			delete(next.sets, name)
		}
		for _, name := range shrunk {
			next.sets[name] = p.sets[name]
		}
	}
	return nil
}

// refusing is want's sets as step 1 of an Apply writes them: each
// family's set of frontends without backends also keeps what it holds in
// cur and holds the frontends in refuse; the members want lacks are
// deleted in step 3, once the commits are in force. A set want drops
// (its family has no frontend any more) still gets refuse's: the rules in
// force until the commit use it.
func refusing(m Mode, cur, want map[string]*ipSet, refuse []policy.ServiceFrontend) map[string]*ipSet {
	out, cloned := want, false
	for _, f := range families {
		name := noepSetName(m, f)
		w, c := want[name], cur[name]
		if c != nil && (!c.ipPort || c.unknown) {
			c = nil
		}
		if w == nil && c == nil {
			continue // no frontend of f before or after: nothing to refuse
		}
		grown := newFrontendSet(f)
		for _, s := range []*ipSet{w, c} {
			if s != nil {
				maps.Copy(grown.frontends, s.frontends)
			}
		}
		for _, fr := range refuse {
			if familyOf(fr.Addr) == f {
				grown.frontends[fr] = struct{}{}
			}
		}
		if w != nil && len(grown.frontends) == len(w.frontends) || w == nil && len(grown.frontends) == len(c.frontends) {
			continue
		}
		if !cloned {
			out, cloned = maps.Clone(want), true
		}
		out[name] = grown
	}
	return out
}

// setUpdates is the ipset restore batch of step 1: create what is new,
// add and delete members. A set of unknown content that is wanted again
// is flushed and refilled (no rule references it: its last reference went
// in the commit before its destroy was attempted).
func setUpdates(cur, want map[string]*ipSet) []byte {
	var changed []string
	for name, s := range want {
		old := cur[name]
		if old == s || old != nil && !old.unknown && old.sameType(s) && maps.Equal(old.entries, s.entries) && maps.Equal(old.frontends, s.frontends) {
			continue
		}
		changed = append(changed, name)
	}
	slices.Sort(changed)
	var b strings.Builder
	for _, name := range changed {
		s, old := want[name], cur[name]
		if old != nil && !old.sameType(s) {
			old = nil // recreate fails loudly: ipset names the conflict
		}
		if old == nil || old.unknown {
			fmt.Fprintf(&b, "create %s %s family %s hashsize %d maxelem %d\n", name, s.typ(), s.family.ipsetFamily(), hashSize(s.size()), maxElem)
			if old != nil {
				b.WriteString("flush " + name + "\n")
			}
			old = nil
		}
		if s.ipPort {
			writeFrontendUpdates(&b, name, old, s)
			continue
		}
		for _, e := range sortedPrefixes(s.entries) {
			nomatch := s.entries[e]
			if old != nil {
				if was, ok := old.entries[e]; ok && was == nomatch {
					continue
				}
			}
			b.WriteString("add " + name + " " + entryText(s, e))
			if nomatch {
				b.WriteString(" nomatch")
			}
			b.WriteByte('\n')
		}
		if old == nil {
			continue
		}
		for _, e := range sortedPrefixes(old.entries) {
			if _, ok := s.entries[e]; !ok {
				b.WriteString("del " + name + " " + entryText(s, e) + "\n")
			}
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return []byte(b.String())
}

// chainUpdates is the iptables-restore --noflush payload of step 2 for
// family f (nil when nothing changes), the chains in force once it is
// committed and their dead rules. Hook chains (per-endpoint jumps) change
// rule by rule; new chains are declared and filled.
//
// A chain whose content changed is flushed and refilled, or, with prepend
// (iptables-nft), gets its new content inserted at its head, ending in a
// rule that matches every packet, which leaves the old rules unreachable.
// A commit that deletes rules costs iptables-nft a whole RCU grace period
// when its socket closes (the kernel waits for the rules' release, holding
// the lock every other commit of the netns needs): tens of milliseconds on
// a busy node, and twice per change, once per family. Dead rules cost
// memory and kernel validation on later commits but are never evaluated;
// once a family holds more than its dead budget, the commit flushes and
// refills every chain with dead rules instead, and a full reconcile
// (a resync) clears them too. Dead rules must not keep a set the plan
// drops (the kernel refuses to destroy a set a rule references, seed
// 000): a changed chain whose rules reference such a set is flushed, and
// so is a chain whose dead rules do.
//
// After a read, every wanted chain is rewritten, every other lockstep
// chain deleted, and the jumps from built-in chains replaced by one each,
// first in its chain.
func chainUpdates(cur *state, p *plan, f Family, prepend bool) ([]byte, map[string][]string, map[string]int) {
	want, have, dead := p.chains[f.index()], cur.chains[f.index()], cur.dead[f.index()]
	next := make(map[string][]string, len(want))
	nextDead := map[string]int{}
	var rewrite, changed, edit, remove []string
	live, deadTotal := 0, 0
	for c, rules := range want {
		old, ok := have[c]
		next[c] = rules
		live += len(rules)
		switch {
		case cur.read || !ok:
			rewrite = append(rewrite, c)
		case isDispatch(c):
			if !slices.Equal(old, rules) {
				edit = append(edit, c)
			}
		case !sameRules(liveRules(old, dead[c]), rules):
			if !keepsSets(old, p.sets) {
				rewrite = append(rewrite, c)
				break
			}
			changed = append(changed, c)
			deadTotal += len(old)
		case dead[c] > 0:
			if !keepsSets(old[len(old)-dead[c]:], p.sets) {
				rewrite = append(rewrite, c)
				break
			}
			next[c], nextDead[c] = old, dead[c]
			deadTotal += dead[c]
		}
	}
	var prepended []string
	if prepend && deadTotal <= deadBudget(live) {
		prepended = changed
	} else {
		rewrite = append(rewrite, changed...)
		for c := range nextDead {
			rewrite = append(rewrite, c)
			next[c] = want[c]
		}
		clear(nextDead)
	}
	for c := range have {
		if _, ok := want[c]; !ok {
			remove = append(remove, c)
		}
	}
	slices.Sort(rewrite)
	slices.Sort(prepended)
	slices.Sort(edit)
	slices.Sort(remove)
	var decl, dels, adds, drops []string
	for _, c := range prepended {
		if len(have[c]) == 0 {
			for _, r := range want[c] {
				adds = append(adds, "-A "+c+" "+r)
			}
			continue
		}
		head := terminated(want[c])
		for i := len(head) - 1; i >= 0; i-- {
			adds = append(adds, "-I "+c+" 1 "+head[i])
		}
		next[c] = append(slices.Clip(head), have[c]...)
		nextDead[c] = len(have[c])
	}
	for _, c := range edit {
		rm, add, merged := diffRules(have[c], want[c])
		for _, r := range rm {
			dels = append(dels, "-D "+c+" "+r)
		}
		for _, r := range add {
			adds = append(adds, "-A "+c+" "+r)
		}
		next[c] = merged
	}
	for _, c := range rewrite {
		if _, ok := have[c]; ok {
			decl = append(decl, "-F "+c) // cheaper than redeclaring for iptables-nft
		} else {
			decl = append(decl, ":"+c+" - [0:0]")
		}
		for _, r := range want[c] {
			adds = append(adds, "-A "+c+" "+r)
		}
	}
	for _, c := range remove {
		decl = append(decl, "-F "+c)
		drops = append(drops, "-X "+c)
	}
	if cur.read {
		for _, r := range cur.foreign[f.index()] {
			dels = append(dels, "-D"+strings.TrimPrefix(r, "-A"))
		}
		for _, h := range hooks {
			adds = append(adds, "-I "+h.builtin+" 1 -m comment --comment \""+jumpComment+"\" -j "+h.chain)
		}
	}
	if len(nextDead) == 0 {
		nextDead = nil
	}
	if len(decl)+len(dels)+len(adds)+len(drops) == 0 {
		return nil, next, nextDead
	}
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, group := range [][]string{decl, dels, adds, drops} {
		for _, line := range group {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String()), next, nextDead
}

// Dead rules a family may hold before a commit clears them: 5% of its
// rules, at least minDeadBudget.
const minDeadBudget = 2000

func deadBudget(live int) int { return max(minDeadBudget, live/20) }

// terminal is the rule that ends prepended content when the chain's own
// last rule does not match every packet: without it, a packet would go on
// to the old rules. Rendered chains never end with it, so liveRules can
// strip it.
const terminal = "-j RETURN"

// terminated returns rules ending in a rule that matches every packet.
func terminated(rules []string) []string {
	if n := len(rules); n > 0 && (rules[n-1] == "-j DROP" || rules[n-1] == terminal) {
		return rules
	}
	return append(slices.Clip(rules), terminal)
}

// liveRules is the reachable part of a chain that ends in dead rules: its
// prepended content without the terminal rule prepending added.
func liveRules(rules []string, dead int) []string {
	if dead == 0 {
		return rules
	}
	l := rules[:len(rules)-dead]
	if n := len(l); n > 0 && l[n-1] == terminal {
		l = l[:n-1]
	}
	return l
}

// sameRules is slices.Equal, short-cut for the slices an unchanged
// endpoint's render shares with the applied state.
func sameRules(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}

// restoreFamilies commits each family's payload (nil: nothing to do). With
// iptables-nft the two run at the same time: they are separate tables, and
// most of each run is reading the table, which the kernel serves in
// parallel. Legacy tools take one lock (xtables.lock) and run one by one.
func (d *Dataplane) restoreFamilies(payloads [2][]byte) error {
	var errs [2]error
	var wg sync.WaitGroup
	for _, f := range d.r.fams {
		payload := payloads[f.index()]
		if payload == nil {
			continue
		}
		run := func() {
			if err := d.iptablesRestore(f, payload); err != nil {
				errs[f.index()] = fmt.Errorf("rewrite %s chains: %w", f, err)
			}
		}
		if d.mode == ModeNFT {
			wg.Go(run)
		} else {
			run()
		}
	}
	wg.Wait()
	return errors.Join(errs[0], errs[1])
}

// diffRules compares a hook chain's rules as sets: the rules to delete,
// the rules to append, and the chain's rules once that is done.
func diffRules(old, want []string) (rm, add, merged []string) {
	inWant := make(map[string]bool, len(want))
	for _, r := range want {
		inWant[r] = true
	}
	inOld := make(map[string]bool, len(old))
	for _, r := range old {
		inOld[r] = true
		if inWant[r] {
			merged = append(merged, r)
		} else {
			rm = append(rm, r)
		}
	}
	for _, r := range want {
		if !inOld[r] {
			add = append(add, r)
			merged = append(merged, r)
		}
	}
	return rm, add, merged
}

// ipsetRestore runs one ipset restore batch. -exist makes every line
// idempotent: creating an identical set, adding a member (which also
// updates its nomatch flag), deleting a missing one, destroying a missing
// set.
func (d *Dataplane) ipsetRestore(batch []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	_, err := d.run.Run(ctx, ipsetTool, []string{"-exist", "restore"}, batch)
	return err
}

func (d *Dataplane) iptablesRestore(f Family, payload []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	return Restore(ctx, d.run, d.mode, f, payload)
}

// restoreArgs: wait up to 5 s for the xtables lock (legacy; nft ignores
// it), and leave everything not named in the payload alone.
var restoreArgs = []string{"-w", "5", "--noflush"}

// Stats describe the applied state, for `lockstep status` and metrics.
type Stats struct {
	// Mode is the dataplane's iptables mode.
	Mode Mode
	// Sets and SetEntries count lockstep's ipsets and their members.
	Sets, SetEntries int
	// Chains and Rules count lockstep's chains and their rules, both
	// families and the filter and nat tables together (the jumps from
	// built-in chains not included).
	Chains, Rules int
	// DeadRules counts the unreachable rules that iptables-nft changes
	// leave behind the live ones (see chainUpdates), both families;
	// Compact and a full reconcile remove them. Rules counts only live
	// rules, without the rule that ends prepended content.
	DeadRules int
	// LastApply is how long the last successful Apply took, and
	// LastApplyEnd when it finished.
	LastApply    time.Duration
	LastApplyEnd time.Time
	// Applies counts Apply calls; FullReconciles those that read the
	// state back first; Failures those that returned an error.
	Applies, FullReconciles, Failures uint64
}

// Stats returns the counts as of the last successful Apply.
func (d *Dataplane) Stats() Stats {
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	return d.stats
}

// keepsSets reports whether every set rules match is in sets.
func keepsSets(rules []string, sets map[string]*ipSet) bool {
	for _, r := range rules {
		for _, name := range matchSets(r) {
			if sets[name] == nil {
				return false
			}
		}
	}
	return true
}

// matchSets lists the sets a rule matches (--match-set NAME).
func matchSets(rule string) []string {
	var out []string
	for {
		_, after, ok := strings.Cut(rule, "--match-set ")
		if !ok {
			return out
		}
		name, _, _ := strings.Cut(after, " ")
		out = append(out, name)
		rule = after
	}
}

// deadRules counts the unreachable rules s's chains hold.
func (s *state) deadRules() int {
	n := 0
	for _, dead := range s.dead {
		for _, k := range dead {
			n += k
		}
	}
	return n
}

func (s *state) counts() (sets, entries, chains, rules int) {
	for _, set := range s.sets {
		sets++
		entries += set.size()
	}
	for i, cs := range s.chains {
		for c, rs := range cs {
			chains++
			rules += len(liveRules(rs, s.dead[i][c]))
		}
	}
	for _, cs := range s.nat {
		for _, rs := range cs {
			chains++
			rules += len(rs)
		}
	}
	return sets, entries, chains, rules
}
