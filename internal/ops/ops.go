package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Check is one named health check.
type Check struct {
	// Name is what probe output and ?exclude= call the check: lower case,
	// words joined by '-'.
	Name string
	// Fn returns nil when the check passes, otherwise what is wrong or
	// what the command waits for.
	Fn func(context.Context) error
}

// Endpoints are what Handler serves.
type Endpoints struct {
	// Live are the checks of /healthz; Ready those of /readyz.
	Live, Ready []Check
	// Metrics writes every metric in the Prometheus text format; nil
	// serves no /metrics.
	Metrics func(io.Writer)
}

// Handler serves /healthz (and /livez, its name on kube-apiserver), /readyz
// and /metrics.
func Handler(e Endpoints) http.Handler {
	mux := http.NewServeMux()
	for path, checks := range map[string][]Check{"healthz": e.Live, "livez": e.Live, "readyz": e.Ready} {
		mux.HandleFunc("GET /"+path, func(w http.ResponseWriter, r *http.Request) { serveAll(w, r, path, checks) })
		mux.HandleFunc("GET /"+path+"/{name}", func(w http.ResponseWriter, r *http.Request) { serveOne(w, r, checks) })
	}
	if e.Metrics != nil {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			e.Metrics(w)
		})
	}
	return mux
}

// serveAll runs every check not excluded and writes the verdict.
func serveAll(w http.ResponseWriter, r *http.Request, path string, checks []Check) {
	q := r.URL.Query()
	excluded := map[string]bool{}
	for _, name := range q["exclude"] {
		excluded[strings.TrimSpace(name)] = true
	}
	var b strings.Builder
	failed := false
	for _, c := range checks {
		if excluded[c.Name] {
			fmt.Fprintf(&b, "[+]%s excluded: ok\n", c.Name)
			delete(excluded, c.Name)
			continue
		}
		if err := c.Fn(r.Context()); err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %s\n", c.Name, oneLine(err))
			continue
		}
		fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
	}
	if len(excluded) > 0 {
		names := make([]string, 0, len(excluded))
		for n := range excluded {
			names = append(names, fmt.Sprintf("%q", n))
		}
		slices.Sort(names)
		fmt.Fprintf(&b, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(names, ","))
	}
	header(w)
	if failed {
		fmt.Fprintf(&b, "%s check failed\n", path)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, b.String())
		return
	}
	if _, verbose := q["verbose"]; verbose {
		fmt.Fprintf(&b, "%s check passed\n", path)
		_, _ = io.WriteString(w, b.String())
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// serveOne runs the check named in the path.
func serveOne(w http.ResponseWriter, r *http.Request, checks []Check) {
	name := r.PathValue("name")
	i := slices.IndexFunc(checks, func(c Check) bool { return c.Name == name })
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	header(w)
	if err := checks[i].Fn(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%s failed: %s\n", name, oneLine(err))
		return
	}
	_, _ = io.WriteString(w, "ok")
}

func header(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// oneLine keeps a check's error on its line of the verdict.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// Server is an ops HTTP server with its listener open.
type Server struct {
	lis net.Listener
	srv *http.Server
}

// Listen opens a TCP listener on addr (host:port; ":9962" is every
// address, port 0 any free port) for h. Serve serves it.
func Listen(addr string, h http.Handler) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Server{lis: lis, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}, nil
}

// Addr is the address the server listens on, with the port chosen when addr
// asked for port 0.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Serve serves until Shutdown, then returns nil.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.lis); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops the server, letting requests in flight finish until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
