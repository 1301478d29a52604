package benchkit

// Progress reports a long series of steps through logf at every tenth of
// the way ("what: done/total"), so that a long run shows it is moving.
type Progress struct {
	what        string
	total, done int
	nextTenth   int
	logf        func(format string, args ...any)
}

// NewProgress counts total steps of what, reporting through logf.
func NewProgress(what string, total int, logf func(format string, args ...any)) *Progress {
	return &Progress{what: what, total: total, nextTenth: 1, logf: logf}
}

// Step counts one step done.
func (p *Progress) Step() {
	p.done++
	if p.done*10 >= p.nextTenth*p.total {
		p.logf("  %s: %d/%d", p.what, p.done, p.total)
		for p.done*10 >= p.nextTenth*p.total {
			p.nextTenth++
		}
	}
}
