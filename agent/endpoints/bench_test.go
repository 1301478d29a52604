package endpoints

import (
	"fmt"
	"testing"

	"lockstep.dev/lockstep/agent/api"
)

// BenchmarkAddConfirmDel measures the agent side of one pod's life: the
// durable ADD, the confirm and the durable DEL, state file on the test's
// temporary directory (fsync included).
func BenchmarkAddConfirmDel(b *testing.B) {
	t := &testing.T{}
	f := newFixture(t, b.TempDir(), Config{}, "10.0.0.0/16")
	b.ResetTimer()
	for i := range b.N {
		a := api.Attachment{ContainerID: fmt.Sprintf("bench-%d", i), IfName: "eth0"}
		resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: a, Netns: "/x"})
		if err != nil {
			b.Fatal(err)
		}
		if err := f.svc.Confirm(ctx, api.OpRequest{Attachment: a, OpID: resp.OpID}); err != nil {
			b.Fatal(err)
		}
		if _, err := f.svc.Del(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
}
