package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait schedule of one failing operation. Its zero value
// needs First and Max set before use; it is not safe for concurrent use.
type Backoff struct {
	// First is the wait after the first failure, Max the longest wait.
	First, Max time.Duration
	// ResetAfter, when positive, starts the schedule again from First
	// when the previous failure is longer ago than it (a loop that has
	// no success to report, such as a watch that ends, counts time
	// without failures as one).
	ResetAfter time.Duration
	// Jitter adds a random part of up to one step to every wait, so that
	// a fleet of agents does not retry at once: a wait is then up to twice
	// its step, so up to twice Max.
	Jitter bool

	next time.Duration
	last time.Time
}

// Next records a failure at now and returns how long to wait before the
// next attempt.
func (b *Backoff) Next(now time.Time) time.Duration {
	if b.next == 0 || (b.ResetAfter > 0 && now.Sub(b.last) > b.ResetAfter) {
		b.next = b.First
	}
	b.last = now
	d := b.next
	b.next = min(2*b.next, b.Max)
	if b.Jitter && d > 0 {
		d += rand.N(d)
	}
	return d
}

// Reset records a success: the next failure waits First again.
func (b *Backoff) Reset() { b.next = 0 }

// After returns the wait after the n-th consecutive failure (0 for none),
// for callers that keep the count themselves: First, doubling, at most
// Max. It does not change b.
func (b *Backoff) After(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := b.First
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Sleep waits d and reports false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
