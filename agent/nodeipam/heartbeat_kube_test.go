package nodeipam

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/watchdog"
	"lockstep.dev/lockstep/internal/watchdog/watchdogtest"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// TestKubeSyncerBeatsUntilAPassHangs: a Syncer waiting for its Node and
// NodeIPAM is idle, not stuck, and keeps its heartbeat alive; a pass that
// hangs silences it, and the watchdog names the loop.
func TestKubeSyncerBeatsUntilAPassHangs(t *testing.T) {
	c := startCluster(t)
	const node, deadline = "node-heartbeat", 500 * time.Millisecond
	wd := watchdog.New()
	var hang atomic.Bool
	release := make(chan struct{})
	h := hooks{afterRead: func(*v1alpha1.NodeIPAM) {
		if hang.Load() {
			<-release
		}
	}}
	a := c.startAgent(t, t.TempDir(), node, h, func(o *Options) { o.Heartbeat = wd.Register("nodeipam", deadline) })
	var once sync.Once
	unhang := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhang) // before the agent stops

	watchdogtest.StaysAlive(t, wd, 3*deadline, "Syncer waiting for a Node and NodeIPAM that do not exist")
	uid := c.createNode(t, node)
	c.createNodeIPAM(t, node, uid, "10.244.9.0/29")
	a.ready(t)

	hang.Store(true) // the next pass, on the heartbeat's tick at the latest, hangs
	watchdogtest.ExpectStalled(t, wd, "nodeipam", "a pass hung")
	hang.Store(false)
	unhang()
	watchdogtest.ExpectAlive(t, wd, "the pass returned")
}
