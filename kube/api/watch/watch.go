package watch

import (
	"sync"

	"lockstep.dev/lockstep/kube/api/runtime"
)

// EventType is what happened to the event's object.
type EventType string

// The event types of a watch stream.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

// Event is one event: the object as it is now (as it was last, for
// Deleted), or a *metav1.Status for Error.
type Event struct {
	Type   EventType
	Object runtime.Object
}

// Interface is a watch stream; Stop ends it and closes ResultChan.
type Interface interface {
	Stop()
	ResultChan() <-chan Event
}

// FakeWatcher is a watch stream a test feeds by hand.
type FakeWatcher struct {
	result  chan Event
	once    sync.Once
	mu      sync.Mutex
	stopped bool
}

// NewFake returns a FakeWatcher whose sends block until read.
func NewFake() *FakeWatcher {
	return &FakeWatcher{result: make(chan Event)}
}

// Stop closes the stream (once).
func (f *FakeWatcher) Stop() {
	f.once.Do(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.stopped = true
		close(f.result)
	})
}

// IsStopped reports whether Stop was called.
func (f *FakeWatcher) IsStopped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}

// ResultChan returns the stream.
func (f *FakeWatcher) ResultChan() <-chan Event { return f.result }

// Add sends an Added event.
func (f *FakeWatcher) Add(obj runtime.Object) { f.result <- Event{Type: Added, Object: obj} }

// Modify sends a Modified event.
func (f *FakeWatcher) Modify(obj runtime.Object) { f.result <- Event{Type: Modified, Object: obj} }

// Delete sends a Deleted event.
func (f *FakeWatcher) Delete(obj runtime.Object) { f.result <- Event{Type: Deleted, Object: obj} }

// Error sends an Error event.
func (f *FakeWatcher) Error(obj runtime.Object) { f.result <- Event{Type: Error, Object: obj} }

// Action sends an event of any type.
func (f *FakeWatcher) Action(t EventType, obj runtime.Object) {
	f.result <- Event{Type: t, Object: obj}
}
