package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// request is what the fake API server saw.
type request struct {
	method string
	path   string
	query  url.Values
	body   string
}

// fakeAPIServer answers every request with one canned response and
// remembers the requests.
type fakeAPIServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []request
	status   int
	response any
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{status: http.StatusOK}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, request{r.Method, r.URL.Path, r.URL.Query(), string(body)})
		status, response := f.status, f.response
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(response)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.NewForConfig(&client.Config{Host: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func statusError(code int32, reason metav1.StatusReason) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: code, Reason: reason, Message: string(reason),
	}
}

func nodeIPAM(rv string) *v1alpha1.NodeIPAM {
	n := v1alpha1.NewNodeIPAM("node-a", "uid-a")
	n.ResourceVersion = rv
	n.Generation = 3
	n.Spec.Blocks = []v1alpha1.Block{{CIDR: "10.244.0.0/26", Pool: "default"}}
	n.Status.ObservedGeneration = 3
	return n
}

const api = "/apis/lockstep.dev/v1alpha1/"

func TestRequests(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		response any
		call     func(context.Context, *client.Client) error
		// want is the request the call must make; nil means none.
		want     *request
		wantBody []string // substrings of the request body
		wantErr  func(error) bool
	}{{
		name:     "get nodeipam",
		response: nodeIPAM("7"),
		call: func(ctx context.Context, c *client.Client) error {
			n, err := c.NodeIPAMs().Get(ctx, "node-a", metav1.GetOptions{})
			if err == nil && (n.ResourceVersion != "7" || !n.ControlledBy("uid-a") || n.Spec.Block("10.244.0.0/26") == nil) {
				return errors.New("decoded the wrong object")
			}
			return err
		},
		want: &request{method: "GET", path: api + "nodeipams/node-a"},
	}, {
		name:     "get missing nodeipam is NotFound",
		status:   http.StatusNotFound,
		response: statusError(http.StatusNotFound, metav1.StatusReasonNotFound),
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.NodeIPAMs().Get(ctx, "node-a", metav1.GetOptions{})
			return err
		},
		want:    &request{method: "GET", path: api + "nodeipams/node-a"},
		wantErr: apierrors.IsNotFound,
	}, {
		name: "list ippools by label",
		response: &v1alpha1.IPPoolList{
			TypeMeta: metav1.TypeMeta{APIVersion: "lockstep.dev/v1alpha1", Kind: "IPPoolList"},
			ListMeta: metav1.ListMeta{ResourceVersion: "12"},
			Items:    []v1alpha1.IPPool{{ObjectMeta: metav1.ObjectMeta{Name: "default"}}},
		},
		call: func(ctx context.Context, c *client.Client) error {
			l, err := c.IPPools().List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"tier": "gold"}.String()})
			if err == nil && (l.ResourceVersion != "12" || len(l.Items) != 1 || l.Items[0].Name != "default") {
				return errors.New("decoded the wrong list")
			}
			return err
		},
		want: &request{method: "GET", path: api + "ippools", query: url.Values{"labelSelector": {"tier=gold"}}},
	}, {
		name:     "create nodeipam carries the node as controller",
		status:   http.StatusCreated,
		response: nodeIPAM("1"),
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.NodeIPAMs().Create(ctx, v1alpha1.NewNodeIPAM("node-a", "uid-a"), metav1.CreateOptions{})
			return err
		},
		want:     &request{method: "POST", path: api + "nodeipams"},
		wantBody: []string{`"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"node-a","uid":"uid-a","controller":true}]`},
	}, {
		name:     "create existing nodeipam is AlreadyExists",
		status:   http.StatusConflict,
		response: statusError(http.StatusConflict, metav1.StatusReasonAlreadyExists),
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.NodeIPAMs().Create(ctx, v1alpha1.NewNodeIPAM("node-a", "uid-a"), metav1.CreateOptions{})
			return err
		},
		want:    &request{method: "POST", path: api + "nodeipams"},
		wantErr: apierrors.IsAlreadyExists,
	}, {
		name:     "update sends the resourceVersion it read",
		response: nodeIPAM("8"),
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.NodeIPAMs().Update(ctx, nodeIPAM("7"), metav1.UpdateOptions{})
			return err
		},
		want:     &request{method: "PUT", path: api + "nodeipams/node-a"},
		wantBody: []string{`"resourceVersion":"7"`},
	}, {
		name: "update without resourceVersion is refused before any request",
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.NodeIPAMs().Update(ctx, nodeIPAM(""), metav1.UpdateOptions{})
			return err
		},
		wantErr: func(err error) bool { return errors.Is(err, client.ErrNoResourceVersion) },
	}, {
		name: "update status without resourceVersion is refused before any request",
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.NodeIPAMs().UpdateStatus(ctx, nodeIPAM(""), metav1.UpdateOptions{})
			return err
		},
		wantErr: func(err error) bool { return errors.Is(err, client.ErrNoResourceVersion) },
	}, {
		name:     "update on a stale read is a Conflict",
		status:   http.StatusConflict,
		response: statusError(http.StatusConflict, metav1.StatusReasonConflict),
		call: func(ctx context.Context, c *client.Client) error {
			_, err := c.NodeIPAMs().Update(ctx, nodeIPAM("6"), metav1.UpdateOptions{})
			return err
		},
		want:    &request{method: "PUT", path: api + "nodeipams/node-a"},
		wantErr: apierrors.IsConflict,
	}, {
		name:     "agent status goes to the status subresource",
		response: nodeIPAM("8"),
		call: func(ctx context.Context, c *client.Client) error {
			n := nodeIPAM("7")
			n.Status.Releases = []v1alpha1.ReleaseAnswer{{CIDR: "10.244.0.0/26", State: v1alpha1.DoNotRelease}}
			_, err := c.NodeIPAMs().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		},
		want:     &request{method: "PUT", path: api + "nodeipams/node-a/status"},
		wantBody: []string{`"resourceVersion":"7"`, `"state":"do-not-release"`, `"observedGeneration":3`},
	}, {
		name:     "ippool status with dry run",
		response: &v1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "3"}},
		call: func(ctx context.Context, c *client.Client) error {
			p := &v1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "2"}}
			_, err := c.IPPools().UpdateStatus(ctx, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		want: &request{method: "PUT", path: api + "ippools/default/status", query: url.Values{"dryRun": {"All"}}},
	}, {
		name:     "delete only the object that was read",
		response: statusError(http.StatusOK, ""),
		call: func(ctx context.Context, c *client.Client) error {
			return c.NodeIPAMs().Delete(ctx, "node-a", metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions("uid-stale")})
		},
		want:     &request{method: "DELETE", path: api + "nodeipams/node-a"},
		wantBody: []string{`"preconditions":{"uid":"uid-stale"}`},
	}, {
		name:     "delete of a replaced object is a Conflict",
		status:   http.StatusConflict,
		response: statusError(http.StatusConflict, metav1.StatusReasonConflict),
		call: func(ctx context.Context, c *client.Client) error {
			return c.NodeIPAMs().Delete(ctx, "node-a", metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions("uid-stale")})
		},
		want:    &request{method: "DELETE", path: api + "nodeipams/node-a"},
		wantErr: apierrors.IsConflict,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPIServer(t)
			if tt.status != 0 {
				f.status = tt.status
			}
			f.response = tt.response
			err := tt.call(t.Context(), f.client(t))
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != nil && !tt.wantErr(err):
				t.Fatalf("error %v is not the one expected", err)
			}
			if tt.want == nil {
				if len(f.requests) != 0 {
					t.Fatalf("made %d requests, want none", len(f.requests))
				}
				return
			}
			if len(f.requests) != 1 {
				t.Fatalf("made %d requests, want 1", len(f.requests))
			}
			got := f.requests[0]
			if got.method != tt.want.method || got.path != tt.want.path {
				t.Errorf("request %s %s, want %s %s", got.method, got.path, tt.want.method, tt.want.path)
			}
			for k, v := range tt.want.query {
				if got.query.Get(k) != v[0] {
					t.Errorf("query %s=%q, want %q (query %v)", k, got.query.Get(k), v[0], got.query)
				}
			}
			for _, s := range tt.wantBody {
				if !strings.Contains(got.body, s) {
					t.Errorf("request body lacks %s:\n%s", s, got.body)
				}
			}
		})
	}
}

func TestErrorsNameTheAction(t *testing.T) {
	f := newFakeAPIServer(t)
	f.status = http.StatusConflict
	f.response = statusError(http.StatusConflict, metav1.StatusReasonConflict)
	_, err := f.client(t).NodeIPAMs().UpdateStatus(t.Context(), nodeIPAM("7"), metav1.UpdateOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), "update nodeipam status node-a: ") {
		t.Errorf("error %q should start with the action", err)
	}
}
