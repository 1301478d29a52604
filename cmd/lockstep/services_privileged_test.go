//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
)

// serviceManifests is a Service whose targetPort is named, and two pods it
// selects: web-1 declares the name, web-2 declares it only when webPort2
// is set.
const serviceManifests = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: default, labels: {app: web}}
spec: {containers: [{name: c, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: default, labels: {app: web}}
spec: {containers: [{name: c, ports: [{name: %s, containerPort: 9090}]}]}
`

// metricsAddr is where the test's agent serves /metrics, inside its node.
const metricsAddr = "127.0.0.1:19962"

// TestPrivilegedStandaloneServiceBackends runs a standalone agent on a
// manifest Service: its pods become backends as their CNI ADDs commit
// (those that declare the named target port), follow a manifest edit, and
// leave on DEL; lockstep status and /metrics count what was applied.
func TestPrivilegedStandaloneServiceBackends(t *testing.T) {
	manifests := t.TempDir()
	file := filepath.Join(manifests, "web.yaml")
	write := func(webPort2 string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, fmt.Appendf(nil, serviceManifests, webPort2), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("metrics")
	node := newNode(t, nodesim.NodeOptions{Manifests: manifests, Pools: []string{"10.244.0.0/24"},
		AgentArgs: []string{"--metrics-addr", metricsAddr}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	services := func() api.ServicesStatus {
		t.Helper()
		st, err := api.NewClient(node.Socket, 2*time.Second).Status(ctx)
		if err != nil || st.Dataplane == nil || st.Dataplane.Services == nil {
			t.Fatalf("status: %+v, %v", st, err)
		}
		return *st.Dataplane.Services
	}
	waitFor := func(what string, want api.ServicesStatus) {
		t.Helper()
		var got api.ServicesStatus
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got = services(); reflect.DeepEqual(got, want) {
				return
			}
		}
		t.Fatalf("%s: lockstep status counts %+v, want %+v", what, got, want)
	}
	waitFor("no pod ADDed yet", api.ServicesStatus{Frontends: 1, WithoutBackends: 1})

	web1, web2 := newPod(t), newPod(t)
	rt1 := nodesim.Runtime("web-1", web1, "eth0", "default", "web-1")
	if _, err := node.Add(ctx, rt1); err != nil {
		t.Fatal(err)
	}
	waitFor("web-1 ADDed", api.ServicesStatus{Frontends: 1, Backends: 1})
	if _, err := node.Add(ctx, nodesim.Runtime("web-2", web2, "eth0", "default", "web-2")); err != nil {
		t.Fatal(err)
	}
	// web-2 has an address but no port named http: no backend of port 80.
	time.Sleep(200 * time.Millisecond)
	waitFor("web-2 ADDed without the named port", api.ServicesStatus{Frontends: 1, Backends: 1})
	write("http")
	waitFor("web-2 given the named port by an edit", api.ServicesStatus{Frontends: 1, Backends: 2})
	if m := scrape(t, node, "lockstep_service_backends"); m != "lockstep_service_backends 2" {
		t.Errorf("/metrics: %q, want lockstep_service_backends 2", m)
	}
	// web-1's http is 8080, web-2's 9090: a slice each, as Kubernetes'
	// controller groups endpoints by their ports.
	if m := scrape(t, node, "lockstep_endpoint_slices"); m != "lockstep_endpoint_slices 2" {
		t.Errorf("/metrics: %q, want lockstep_endpoint_slices 2", m)
	}
	if err := node.Del(ctx, rt1); err != nil {
		t.Fatal(err)
	}
	waitFor("web-1 deleted", api.ServicesStatus{Frontends: 1, Backends: 1})

	// Beside what was applied, both show the conntrack tables'
	// evictions: none on this quiet node.
	const evictions = "lockstep_datapath_conntrack_evictions_total"
	if m := scrape(t, node, evictions); m != evictions+`{table="lockstep_ct"} 0` {
		t.Errorf("/metrics: %q, want %s{table=\"lockstep_ct\"} 0", m, evictions)
	}
	st, err := api.NewClient(node.Socket, 2*time.Second).Status(ctx)
	if err != nil || st.Dataplane == nil {
		t.Fatalf("status: %+v, %v", st, err)
	}
	for _, table := range []string{"lockstep_ct", "lockstep_svc_ct"} {
		if n, ok := st.Dataplane.Counts["evicted from "+table]; !ok || n != 0 {
			t.Errorf("lockstep status: evicted from %s %d (shown: %v), want 0", table, n, ok)
		}
	}
}

// scrape returns the sample line of metric name from the agent's /metrics,
// read from inside its node.
func scrape(t *testing.T, node *nodesim.Node, name string) string {
	t.Helper()
	var conn net.Conn
	if err := node.NS.Do(func(ns.NetNS) error {
		var err error
		conn, err = net.DialTimeout("tcp", metricsAddr, 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect to the agent's metrics: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", metricsAddr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			return line
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return ""
}
