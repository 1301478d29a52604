//go:build linux

package main

// progress prints "done/total" on stderr at every tenth of the way.
type progress struct {
	what        string
	total, done int
	nextTenth   int
}

func newProgress(what string, total int) *progress {
	return &progress{what: what, total: total, nextTenth: 1}
}

func (p *progress) step() {
	p.done++
	if p.done*10 >= p.nextTenth*p.total {
		logf("  %s: %d/%d", p.what, p.done, p.total)
		for p.done*10 >= p.nextTenth*p.total {
			p.nextTenth++
		}
	}
}
