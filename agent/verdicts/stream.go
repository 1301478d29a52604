package verdicts

import (
	"context"
	"errors"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// Stream returns what the API server runs for one monitor subscriber
// (server.Monitor): subscribe, answer, then name, filter and send every
// event until the subscriber goes away. The subscription ends when it
// returns, whatever ended it, so the last subscriber to go turns
// emission off.
func (h *Hub) Stream(n Namer) func(ctx context.Context, req api.MonitorRequest, ready func() error, send func(api.Verdict) error) error {
	return func(ctx context.Context, req api.MonitorRequest, ready func() error, send func(api.Verdict) error) error {
		f := Filter(req)
		if err := f.Validate(); err != nil {
			return api.Errorf(api.CodeDecodeFailure, "%v", err)
		}
		sub, err := h.Subscribe()
		if errors.Is(err, ErrStopped) {
			return api.Errorf(api.CodeNotAvailable, "%v", err)
		}
		if err != nil {
			return err
		}
		defer sub.Close()
		if err := ready(); err != nil {
			return err
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case ev, ok := <-sub.C:
				if !ok {
					return errors.New("the agent stopped reading verdict events")
				}
				v := Describe(ev, n, time.Now())
				if !f.Match(v) {
					continue
				}
				if err := send(v); err != nil {
					return err
				}
			}
		}
	}
}
