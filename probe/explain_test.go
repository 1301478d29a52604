package probe

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/manifests"
)

// explainedReport is the report a probe of pods and Services over family
// would give if every connection went as explain says: each pod at its
// pinned address, or one made up outside every scenario's blocks, each
// Service at its ClusterIP of family.
func explainedReport(t *testing.T, dir string, pods []Pod, svcs []Service, family string) *Report {
	t.Helper()
	objs, err := manifests.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Via: ViaPodIP}
	if len(svcs) > 0 {
		rep.Via = ViaBoth
	}
	for i, p := range pods {
		fam := 0
		addr := netip.MustParseAddr(fmt.Sprintf("10.250.%d.%d", i/200, i%200+1))
		if family == IPv6 {
			fam, addr = 1, netip.MustParseAddr(fmt.Sprintf("fd00:250::%x", i+1))
		}
		if p.WantIPs[fam].IsValid() {
			addr = p.WantIPs[fam]
		}
		rep.Pods = append(rep.Pods, PodInfo{Namespace: p.Namespace, Name: p.Name, IP: addr.String(), Ports: p.Ports})
	}
	for _, from := range pods {
		for _, to := range pods {
			if from.Key() == to.Key() {
				continue
			}
			for _, port := range to.Ports {
				rep.Results = append(rep.Results, Result{From: from.Key(), To: to.Key(), Port: port.Port, Protocol: port.Protocol})
			}
		}
	}
	fronts, infos := serviceFrontendsOf(svcs, family)
	rep.Services = infos
	for _, from := range pods {
		for _, to := range fronts {
			for _, port := range to.Ports {
				rep.ServiceResults = append(rep.ServiceResults, ServiceResult{From: from.Key(), Service: to.Key(), Port: port.Port, Protocol: port.Protocol})
			}
		}
	}
	if err := rep.Explain(SnapshotOf(objs, rep)); err != nil {
		t.Fatal(err)
	}
	return rep
}

// serviceFrontendsOf gives each Service with a ClusterIP of family its
// ServiceInfo, as a probe of family lists them.
func serviceFrontendsOf(svcs []Service, family string) ([]Service, []ServiceInfo) {
	var fronts []Service
	var infos []ServiceInfo
	for _, s := range svcs {
		addr := s.ClusterIPs[0]
		if family == IPv6 {
			addr = s.ClusterIPs[1]
		}
		if addr.IsValid() {
			fronts = append(fronts, s)
			infos = append(infos, ServiceInfo{Namespace: s.Namespace, Name: s.Name, IP: addr.String(), Ports: s.Ports})
		}
	}
	return fronts, infos
}

// TestExplainAgreesWithScenarios holds explain to the hand-derived tables
// of every probe scenario, in both families, cell by cell: by pod address
// and, for the scenarios with Services, through their ClusterIPs.
// TestPrivilegedProbeScenarios holds the dataplanes' real packets to the
// same tables, and compares explain with the packets directly; this test
// needs no root, so a change to explain that breaks an answer fails
// everywhere. A scenario's edit/ is explained on its edited manifests.
func TestExplainAgreesWithScenarios(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no scenarios (%v)", err)
	}
	for _, dir := range dirs {
		for _, d := range []string{dir, filepath.Join(dir, "edit")} {
			if _, err := os.Stat(d); err != nil {
				continue
			}
			for _, family := range []string{IPv4, IPv6} {
				t.Run(strings.TrimPrefix(d, filepath.Join("testdata", "scenarios")+"/")+"/"+family, func(t *testing.T) {
					pods, svcs, _ := loadScenario(t, dir)
					expected := readExpected(t, d)
					rep := explainedReport(t, d, pods, svcs, family)
					got := rep.ExplainedTable()
					if ms := CompareTables(expected, got); len(ms) > 0 {
						var lines []string
						for _, m := range ms {
							lines = append(lines, "  "+m.String()+": "+reasonOf(rep, m))
						}
						t.Errorf("explain differs from %s in %d cells:\n%s\nexplained:\n%s", d, len(ms), strings.Join(lines, "\n"), got)
					}
					if n := got.Count(CellUnprobeable); n > 0 {
						t.Errorf("%d cells unexplained", n)
					}
				})
			}
		}
	}
}

func reasonOf(rep *Report, m Mismatch) string {
	if m.Service {
		for _, r := range rep.ServiceResults {
			if r.From == m.From && r.Service == m.To && r.Port == m.Port.Port && r.Protocol == m.Port.Protocol {
				return r.Reason
			}
		}
		return "no result"
	}
	for _, r := range rep.Results {
		if r.From == m.From && r.To == m.To && r.Port == m.Port.Port && r.Protocol == m.Port.Protocol {
			return r.Reason
		}
	}
	return "no result"
}
