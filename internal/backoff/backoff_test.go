package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		b    Backoff
		// at are the failure times, as offsets from t0, and reset the
		// indices before which a success is recorded.
		at    []time.Duration
		reset map[int]bool
		want  []time.Duration
	}{
		{
			name: "doubles up to max",
			b:    Backoff{First: 100 * time.Millisecond, Max: time.Second},
			at:   []time.Duration{0, 1, 2, 3, 4, 5},
			want: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second},
		},
		{
			name:  "a success starts again",
			b:     Backoff{First: time.Second, Max: time.Minute},
			at:    []time.Duration{0, 1, 2, 3},
			reset: map[int]bool{2: true},
			want:  []time.Duration{time.Second, 2 * time.Second, time.Second, 2 * time.Second},
		},
		{
			name: "a quiet spell longer than ResetAfter starts again",
			b:    Backoff{First: time.Second, Max: time.Minute, ResetAfter: time.Minute},
			at:   []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Minute, 3*time.Minute + time.Second},
			want: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, time.Second, 2 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.b
			for i, at := range tt.at {
				if tt.reset[i] {
					b.Reset()
				}
				if got := b.Next(t0.Add(at)); got != tt.want[i] {
					t.Errorf("failure %d: wait %v, want %v", i+1, got, tt.want[i])
				}
			}
		})
	}
}

func TestJitterStaysWithinOneStep(t *testing.T) {
	b := Backoff{First: time.Second, Max: 4 * time.Second, Jitter: true}
	now := time.Unix(1000, 0)
	for i, step := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if got := b.Next(now); got < step || got >= 2*step {
			t.Errorf("failure %d: wait %v, want in [%v, %v)", i+1, got, step, 2*step)
		}
	}
}

func TestAfter(t *testing.T) {
	b := Backoff{First: time.Second, Max: 5 * time.Second}
	for n, want := range []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := b.After(n); got != want {
			t.Errorf("After(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep on an ended context reported true")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep of 1ms reported false")
	}
}
