package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"lockstep.dev/lockstep/internal/backoff"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/schema"
	"lockstep.dev/lockstep/kube/api/watch"
)

// Interface makes requests to one API group version: a verb, then the
// request's parts, then Do or Watch.
type Interface interface {
	Get() *Request
	Post() *Request
	Put() *Request
	Delete() *Request
}

// REST is lockstep's own REST client for one group version of one API
// server, in place of client-go's rest.RESTClient (whose package
// initialisers every lockstep-cni start would pay for, see
// cmd/lockstep/deps_test.go). It speaks JSON only.
type REST struct {
	base    *url.URL // the server, with its path prefix
	apiPath string   // "/api" (core) or "/apis"
	gv      schema.GroupVersion
	http    *http.Client
	limiter *rate.Limiter // nil: no limit
	// warned holds the API server's warnings (deprecations) logged
	// already: each is logged once.
	warnedMu sync.Mutex
	warned   map[string]bool
}

var _ Interface = (*REST)(nil)

// Retries, as client-go's: a request answered 429 or 5xx with a
// Retry-After is sent again after the wait the server asks for (capped),
// and a GET whose connection was reset or cut short after resetRetry;
// this many times at most.
const (
	maxRetries    = 10
	maxRetryAfter = 10 * time.Second
	resetRetry    = time.Second
)

// watchGrace is how long past its own timeout a watch is waited for.
var watchGrace = time.Minute

// newREST returns the client of group version gv on the server cfg
// describes.
func newREST(cfg *Config, gv schema.GroupVersion) (*REST, error) {
	base, err := cfg.baseURL()
	if err != nil {
		return nil, err
	}
	rt, err := cfg.roundTripper()
	if err != nil {
		return nil, err
	}
	// Redirects are not followed: an API server does not send them, and
	// the credentials would follow them to wherever they point.
	noRedirects := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &REST{base: base, apiPath: "/apis", gv: gv, http: &http.Client{Transport: rt, CheckRedirect: noRedirects}}
	if gv.Group == "" {
		c.apiPath = "/api"
	}
	qps, burst := cfg.QPS, cfg.Burst
	if qps == 0 {
		qps = defaultQPS
	}
	if burst == 0 {
		burst = defaultBurst
	}
	if qps > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(qps), max(burst, 1))
	}
	return c, nil
}

func (c *REST) Get() *Request    { return c.verb(http.MethodGet) }
func (c *REST) Post() *Request   { return c.verb(http.MethodPost) }
func (c *REST) Put() *Request    { return c.verb(http.MethodPut) }
func (c *REST) Delete() *Request { return c.verb(http.MethodDelete) }

func (c *REST) verb(method string) *Request {
	return &Request{c: c, method: method, params: url.Values{}}
}

// Request is one API request being built.
type Request struct {
	c                                      *REST
	method                                 string
	namespace, resource, name, subresource string
	namespaceSet                           bool
	params                                 url.Values
	body                                   []byte
	timeout                                time.Duration
	err                                    error
}

// Namespace sets the namespace of a namespaced resource.
func (r *Request) Namespace(ns string) *Request {
	r.checkSegment("namespace", ns)
	r.namespace, r.namespaceSet = ns, ns != ""
	return r
}

// Resource sets the resource, plural as in the URL ("pods").
func (r *Request) Resource(resource string) *Request {
	r.checkSegment("resource", resource)
	r.resource = resource
	return r
}

// Name sets the object's name.
func (r *Request) Name(name string) *Request {
	if name == "" && r.err == nil {
		r.err = errors.New("resource name may not be empty")
	}
	r.checkSegment("name", name)
	r.name = name
	return r
}

// SubResource sets a subresource ("status").
func (r *Request) SubResource(sub string) *Request {
	r.checkSegment("subresource", sub)
	r.subresource = sub
	return r
}

// checkSegment refuses, as client-go does, a URL path segment that would
// name another path: "..", ".", or one holding "/" or "%" (a name of
// ".." would otherwise turn a DELETE of an object into one of its
// namespace).
func (r *Request) checkSegment(what, seg string) {
	if r.err != nil {
		return
	}
	if seg == "." || seg == ".." || strings.ContainsAny(seg, "/%") {
		r.err = fmt.Errorf("%s %q may not be '.', '..' or hold '/' or '%%'", what, seg)
	}
}

// VersionedParams adds the query parameters of options such as
// metav1.ListOptions.
func (r *Request) VersionedParams(opts runtime.Object, codec runtime.ParameterCodec) *Request {
	q, err := codec.EncodeParameters(opts, r.c.gv)
	if err != nil {
		if r.err == nil {
			r.err = err // it says what it was encoding
		}
		return r
	}
	for k, vs := range q {
		for _, v := range vs {
			r.params.Add(k, v)
		}
	}
	return r
}

// Timeout bounds the request (the server is told too); a watch only tells
// the server.
func (r *Request) Timeout(d time.Duration) *Request {
	r.timeout = d
	return r
}

// Body sets the request's body: obj as JSON, with its apiVersion and kind
// filled in when it is one of the types this package registers (in the
// request's group version when it is registered there, as options such as
// DeleteOptions are in every group).
func (r *Request) Body(obj runtime.Object) *Request {
	if k, ok := kindOf(obj); ok && obj.GetObjectKind().GroupVersionKind().Kind == "" {
		if k.Version == "" {
			k = r.c.gv.WithKind(k.Kind)
		}
		obj = withKind(obj, k)
	}
	b, err := json.Marshal(obj)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("encode request body: %w", err)
	}
	r.body = b
	return r
}

// url returns the request's URL.
func (r *Request) url() string {
	u := *r.c.base
	parts := []string{u.Path, r.c.apiPath}
	if r.c.gv.Group != "" {
		parts = append(parts, r.c.gv.Group)
	}
	parts = append(parts, r.c.gv.Version)
	if r.namespaceSet {
		parts = append(parts, "namespaces", r.namespace)
	}
	parts = append(parts, r.resource)
	if r.name != "" {
		parts = append(parts, r.name)
	}
	if r.subresource != "" {
		parts = append(parts, r.subresource)
	}
	u.Path = path.Join(parts...)
	q := url.Values{}
	for k, vs := range r.params {
		q[k] = vs
	}
	if r.timeout > 0 {
		q.Set("timeout", r.timeout.String())
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Do sends the request and reads the whole answer.
func (r *Request) Do(ctx context.Context) Result {
	if r.err != nil {
		return Result{err: r.err}
	}
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		var body []byte
		resp, err := r.send(ctx)
		if err == nil {
			body, err = readBody(resp)
			resp.Body.Close()
			if err != nil {
				err = fmt.Errorf("%s %s: read the answer: %w", r.method, r.url(), err)
			}
		}
		wait, retry := r.retry(resp, err)
		if retry && attempt < maxRetries {
			if !backoff.Sleep(ctx, wait) {
				last := err
				if last == nil {
					last = r.statusError(resp, body)
				}
				return Result{err: fmt.Errorf("%s %s: %w while waiting to retry after: %w", r.method, r.url(), context.Cause(ctx), last)}
			}
			continue
		}
		if err != nil {
			return Result{err: err}
		}
		r.c.logWarnings(resp)
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return Result{err: r.statusError(resp, body)}
		}
		return Result{body: body}
	}
}

// maxErrorBody bounds what is read of an answer that is not a success:
// only a Status, or the first bytes of anything else, is used.
const maxErrorBody = 1 << 20

// readBody reads resp's body, at most maxErrorBody of an answer that is
// not a success.
func readBody(resp *http.Response) ([]byte, error) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	}
	return io.ReadAll(resp.Body)
}

// retry reports whether a request that got resp or err is to be sent
// again, and after how long: an answer with Retry-After (see retryAfter),
// or a GET whose connection was reset or ended early.
func (r *Request) retry(resp *http.Response, err error) (time.Duration, bool) {
	if err == nil {
		return retryAfter(resp)
	}
	if r.method == http.MethodGet && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return resetRetry, true
	}
	return 0, false
}

// Bounds of the warnings a client remembers, so that a server sending a
// new one with every answer cannot grow the agent's memory.
const (
	maxWarnings    = 100
	maxWarningSize = 512
)

// logWarnings logs each warning (a deprecated API, say) the API server
// sends, once per client; past maxWarnings distinct ones, no more.
func (c *REST) logWarnings(resp *http.Response) {
	for _, h := range resp.Header.Values("Warning") {
		w := warningText(h)
		if len(w) > maxWarningSize {
			w = strings.ToValidUTF8(w[:maxWarningSize], "") + "…"
		}
		c.warnedMu.Lock()
		_, seen := c.warned[w]
		full := len(c.warned) >= maxWarnings
		if !seen && !full {
			if c.warned == nil {
				c.warned = map[string]bool{}
			}
			c.warned[w] = true
		}
		c.warnedMu.Unlock()
		if !seen && !full {
			slog.Warn("the Kubernetes API server warns", "warning", w, "group", c.gv.String())
		}
	}
}

// warningText returns the text of a Warning header as the API server
// writes it (`299 - "text"`, RFC 7234 section 5.5), or the header whole
// when it is not of that form.
func warningText(h string) string {
	code, rest, ok := strings.Cut(h, " ")
	if !ok || len(code) != 3 || strings.Trim(code, "0123456789") != "" {
		return h
	}
	_, quoted, ok := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(quoted, `"`) {
		return h
	}
	var b strings.Builder
	for i := 1; i < len(quoted); i++ {
		switch ch := quoted[i]; {
		case ch == '"':
			return b.String()
		case ch == '\\' && i+1 < len(quoted):
			i++
			b.WriteByte(quoted[i])
		default:
			b.WriteByte(ch)
		}
	}
	return h // no closing quote
}

// Watch starts a watch and returns its events as they come.
func (r *Request) Watch(ctx context.Context) (watch.Interface, error) {
	if r.err != nil {
		return nil, r.err
	}
	r.params.Set("watch", "true")
	// The server ends a watch at its timeout (Timeout, or the options'
	// timeoutSeconds); a server that stalls instead (answering HTTP/2
	// pings, sending nothing) is given up on watchGrace later.
	timeout := r.timeout
	if s, err := strconv.Atoi(r.params.Get("timeoutSeconds")); err == nil && s > 0 && timeout == 0 {
		timeout = time.Duration(s) * time.Second
	}
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout+watchGrace)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		var err error
		resp, err = r.send(ctx)
		if err != nil {
			cancel()
			return nil, err
		}
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			break
		}
		body, _ := readBody(resp)
		resp.Body.Close()
		if wait, ok := retryAfter(resp); ok && attempt < maxRetries && backoff.Sleep(ctx, wait) {
			continue
		}
		cancel()
		return nil, r.statusError(resp, body)
	}
	r.c.logWarnings(resp)
	w := &watcher{result: make(chan watch.Event), ctx: ctx, cancel: cancel}
	go w.receive(resp.Body)
	return w, nil
}

// send waits for the rate limiter and sends the request once.
func (r *Request) send(ctx context.Context) (*http.Response, error) {
	if r.c.limiter != nil {
		if err := r.c.limiter.Wait(ctx); err != nil {
			return nil, fmt.Errorf("%s %s: wait for the client's rate limit: %w", r.method, r.url(), err)
		}
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.c.http.Do(req)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// retryAfter reports whether resp asks to be retried (429 or 5xx with a
// Retry-After in seconds), and after how long.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return 0, false
	}
	s := resp.Header.Get("Retry-After")
	if s == "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	return min(time.Duration(n)*time.Second, maxRetryAfter), true
}

// statusError turns an answer that is not a success into the API error it
// holds (a metav1.Status), or one of its HTTP code.
func (r *Request) statusError(resp *http.Response, body []byte) error {
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Kind == "Status" && status.Status == metav1.StatusFailure {
		if status.Code == 0 {
			status.Code = int32(resp.StatusCode)
		}
		return &apierrors.StatusError{ErrStatus: status}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 256 {
		msg = strings.ToValidUTF8(msg[:256], "") + "…"
	}
	retry := 0
	if d, ok := retryAfter(resp); ok {
		retry = int(d / time.Second)
	}
	gr := schema.GroupResource{Group: r.c.gv.Group, Resource: r.resource}
	return apierrors.NewGenericServerResponse(resp.StatusCode, r.method, gr, r.name, msg, retry, true)
}

// Result is the answer of Do.
type Result struct {
	body []byte
	err  error
}

// Error returns the request's error, if any.
func (r Result) Error() error { return r.err }

// Into decodes the answer into obj.
func (r Result) Into(obj runtime.Object) error {
	if r.err != nil {
		return r.err
	}
	if err := json.Unmarshal(r.body, obj); err != nil {
		return fmt.Errorf("decode the API server's answer as %T: %w", obj, err)
	}
	return nil
}

// Get decodes the answer into an object of the type its kind names.
func (r Result) Get() (runtime.Object, error) {
	if r.err != nil {
		return nil, r.err
	}
	return decodeObject(r.body)
}

// decodeObject decodes data into a new object of the type its apiVersion
// and kind name, one of those this package registers.
func decodeObject(data []byte) (runtime.Object, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(data, &tm); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	obj, err := newObject(tm.GroupVersionKind())
	if err != nil {
		return nil, fmt.Errorf("decode object of kind %q, apiVersion %q: %w", tm.Kind, tm.APIVersion, err)
	}
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", tm.Kind, err)
	}
	return obj, nil
}

// watcher is a watch's event stream: a JSON object per event,
// {"type": ..., "object": ...}.
type watcher struct {
	result chan watch.Event
	ctx    context.Context // ends with Stop
	cancel context.CancelFunc
}

func (w *watcher) Stop() {
	w.cancel()
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// receive decodes events from body until it ends or the watch is
// stopped. An event that cannot be decoded ends the watch with an ERROR
// event saying so, as client-go's does (the informer then relists).
func (w *watcher) receive(body io.ReadCloser) {
	defer close(w.result)
	defer body.Close()
	defer w.cancel()
	dec := json.NewDecoder(body)
	for {
		var ev struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		err := dec.Decode(&ev)
		var obj runtime.Object
		switch {
		case err != nil:
			var syntax *json.SyntaxError
			var typ *json.UnmarshalTypeError
			if !errors.As(err, &syntax) && !errors.As(err, &typ) {
				return // the stream ended, or was stopped
			}
		case ev.Type == watch.Error:
			status := &metav1.Status{}
			err = json.Unmarshal(ev.Object, status)
			obj = status
		default:
			obj, err = decodeObject(ev.Object)
		}
		if err != nil {
			status := apierrors.NewInternalError(fmt.Errorf("unable to decode an event from the watch stream: %w", err)).Status()
			w.send(watch.Event{Type: watch.Error, Object: &status})
			return
		}
		if !w.send(watch.Event{Type: ev.Type, Object: obj}) {
			return
		}
	}
}

// send hands ev to the reader, unless the watch is stopped first.
func (w *watcher) send(ev watch.Event) bool {
	select {
	case w.result <- ev:
		return true
	case <-w.ctx.Done():
		return false
	}
}
