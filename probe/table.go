package probe

import (
	"fmt"
	"slices"
	"strings"
)

// Cells of a reachability table. The first four are those of the upstream
// Kubernetes e2e tests; the last two appear only in blocks through
// Services (see Outcome).
const (
	CellAllowed     byte = '.'
	CellDenied      byte = 'X'
	CellUnprobeable byte = '?'
	CellSelf        byte = '-'
	CellPartial     byte = '~'
	CellRefused     byte = 'R'
)

// cells lists the cells a block may hold.
func cells(service bool) string {
	if service {
		return string([]byte{CellAllowed, CellDenied, CellPartial, CellRefused, CellUnprobeable})
	}
	return string([]byte{CellAllowed, CellDenied, CellUnprobeable, CellSelf})
}

// ServicePrefix starts the heading of a block through Services:
// "svc:80/TCP" is port 80/TCP of every Service that has it, one column
// per Service.
const ServicePrefix = "svc:"

// Table is a set of reachability tables: one Block per port pods declare,
// then one per port Services declare.
type Table struct {
	Blocks []Block
}

// Block is the reachability of one port: Cells[i][j] is what connections
// from From[i] to To[j] on Port did. In a block through Services, To are
// Services (NAMESPACE/NAME), reached at their ClusterIP on Port.
type Block struct {
	Port    Port
	Service bool
	From    []string
	To      []string
	Cells   [][]byte
}

// Heading returns the block's top left cell: "80/TCP", or "svc:80/TCP"
// through Services.
func (b *Block) Heading() string {
	if b.Service {
		return ServicePrefix + b.Port.String()
	}
	return b.Port.String()
}

// Table renders the report as one block per port any pod declares (rows
// every pod, columns the pods that declare the port), then, through
// Services, one block per port any Service declares (rows every pod,
// columns the Services that declare the port).
func (r *Report) Table() Table {
	pods := slices.Clone(r.Pods)
	(&Report{Pods: pods}).Sort()
	var t Table
	if r.viaPodIP() {
		t.Blocks = append(t.Blocks, r.podBlocks(pods)...)
	}
	if r.viaService() {
		t.Blocks = append(t.Blocks, r.serviceBlocks(pods)...)
	}
	return t
}

// podBlocks are the blocks by pod address.
func (r *Report) podBlocks(pods []PodInfo) []Block {
	var ports []Port
	for _, p := range pods {
		ports = append(ports, normalisePorts(p.Ports)...)
	}
	slices.SortFunc(ports, comparePorts)
	ports = slices.Compact(ports)

	type cellKey struct {
		from, to string
		port     Port
	}
	cells := make(map[cellKey]byte, len(r.Results))
	for _, res := range r.Results {
		c := CellUnprobeable
		if res.Allowed != nil && *res.Allowed {
			c = CellAllowed
		} else if res.Allowed != nil {
			c = CellDenied
		}
		cells[cellKey{res.From, res.To, Port{res.Port, res.Protocol}}] = c
	}

	var blocks []Block
	for _, port := range ports {
		b := Block{Port: port}
		for _, p := range pods {
			b.From = append(b.From, p.Key())
			if slices.Contains(normalisePorts(p.Ports), port) {
				b.To = append(b.To, p.Key())
			}
		}
		for _, from := range b.From {
			row := make([]byte, len(b.To))
			for j, to := range b.To {
				c, ok := cells[cellKey{from, to, port}]
				switch {
				case from == to:
					c = CellSelf
				case !ok:
					c = CellUnprobeable
				}
				row[j] = c
			}
			b.Cells = append(b.Cells, row)
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// serviceBlocks are the blocks through Services. A pod reaching its own
// Service is probed like any other client: there is no self cell.
func (r *Report) serviceBlocks(pods []PodInfo) []Block {
	svcs := slices.Clone(r.Services)
	sortServices(svcs)
	var ports []Port
	for _, s := range svcs {
		ports = append(ports, normalisePorts(s.Ports)...)
	}
	slices.SortFunc(ports, comparePorts)
	ports = slices.Compact(ports)

	type cellKey struct {
		from, svc string
		port      Port
	}
	cells := make(map[cellKey]byte, len(r.ServiceResults))
	for _, res := range r.ServiceResults {
		cells[cellKey{res.From, res.Service, Port{res.Port, res.Protocol}}] = res.Outcome.Cell()
	}
	var blocks []Block
	for _, port := range ports {
		b := Block{Port: port, Service: true}
		for _, p := range pods {
			b.From = append(b.From, p.Key())
		}
		for _, s := range svcs {
			if slices.Contains(normalisePorts(s.Ports), port) {
				b.To = append(b.To, s.Key())
			}
		}
		for _, from := range b.From {
			row := make([]byte, len(b.To))
			for j, to := range b.To {
				c, ok := cells[cellKey{from, to, port}]
				if !ok {
					c = CellUnprobeable
				}
				row[j] = c
			}
			b.Cells = append(b.Cells, row)
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// String renders the tables: columns aligned with two spaces of padding and
// no trailing spaces, blocks separated by a blank line.
func (t Table) String() string {
	var sb strings.Builder
	for i, b := range t.Blocks {
		if i > 0 {
			sb.WriteByte('\n')
		}
		rows := [][]string{append([]string{b.Heading()}, b.To...)}
		for r, from := range b.From {
			row := []string{from}
			for _, c := range b.Cells[r] {
				row = append(row, string(c))
			}
			rows = append(rows, row)
		}
		writeAligned(&sb, rows)
	}
	return sb.String()
}

// writeAligned writes rows as text/tabwriter would with padding 2: every
// column but the last padded to its widest cell plus two spaces.
func writeAligned(sb *strings.Builder, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for j, cell := range row {
			if j == len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], len(cell))
		}
	}
	for _, row := range rows {
		for j, cell := range row {
			sb.WriteString(cell)
			if j < len(row)-1 {
				sb.WriteString(strings.Repeat(" ", widths[j]-len(cell)+2))
			}
		}
		sb.WriteByte('\n')
	}
}

// Count returns how many cells hold c.
func (t Table) Count(c byte) int {
	n := 0
	for _, b := range t.Blocks {
		for _, row := range b.Cells {
			n += strings.Count(string(row), string(c))
		}
	}
	return n
}

// ParseTable reads tables in the format Table.String writes. Blank lines
// separate blocks; lines starting with '#' are comments. Cells are
// compared by name, so a hand-written table may order rows and columns as
// it likes.
func ParseTable(text string) (Table, error) {
	var t Table
	var cur *Block
	for i, line := range strings.Split(text, "\n") {
		lineNo := i + 1
		fields := strings.Fields(line)
		if len(fields) == 0 {
			cur = nil
			continue
		}
		if strings.HasPrefix(fields[0], "#") {
			continue
		}
		if cur == nil {
			heading, service := strings.CutPrefix(fields[0], ServicePrefix)
			port, err := ParsePort(heading)
			if err != nil {
				return Table{}, fmt.Errorf("line %d: block heading: %w", lineNo, err)
			}
			b := Block{Port: port, Service: service, To: fields[1:]}
			if t.block(port, service) != nil {
				return Table{}, fmt.Errorf("line %d: second block for %s", lineNo, b.Heading())
			}
			if dup := firstDuplicate(b.To); dup != "" {
				return Table{}, fmt.Errorf("line %d: column %s appears twice", lineNo, dup)
			}
			t.Blocks = append(t.Blocks, b)
			cur = &t.Blocks[len(t.Blocks)-1]
			continue
		}
		if len(fields) != len(cur.To)+1 {
			return Table{}, fmt.Errorf("line %d: row %s has %d cells, the %s heading has %d columns", lineNo, fields[0], len(fields)-1, cur.Heading(), len(cur.To))
		}
		if slices.Contains(cur.From, fields[0]) {
			return Table{}, fmt.Errorf("line %d: row %s appears twice in %s", lineNo, fields[0], cur.Heading())
		}
		row := make([]byte, len(cur.To))
		valid := cells(cur.Service)
		for j, cell := range fields[1:] {
			if len(cell) != 1 || !strings.Contains(valid, cell) {
				return Table{}, fmt.Errorf("line %d: cell %q (%s -> %s): want one of %s", lineNo, cell, fields[0], cur.To[j], strings.Join(strings.Split(valid, ""), " "))
			}
			row[j] = cell[0]
		}
		cur.From = append(cur.From, fields[0])
		cur.Cells = append(cur.Cells, row)
	}
	return t, nil
}

func firstDuplicate(names []string) string {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return n
		}
		seen[n] = true
	}
	return ""
}

// Mismatch is one cell where two tables disagree. Expected or Actual is 0
// when that table has no such cell (no such block, row or column).
type Mismatch struct {
	Port Port
	// Service: the cell is in a block through Services.
	Service  bool
	From, To string
	Expected byte
	Actual   byte
}

// String describes the mismatch in one line, e.g.
// "80/TCP x/a -> y/b: expected X, got ." or
// "svc:80/TCP x/a -> y/web: expected ., got ~".
func (m Mismatch) String() string {
	b := Block{Port: m.Port, Service: m.Service}
	return fmt.Sprintf("%s %s -> %s: expected %s, got %s", b.Heading(), m.From, m.To, cellName(m.Expected), cellName(m.Actual))
}

func cellName(c byte) string {
	if c == 0 {
		return "no such cell"
	}
	return string(c)
}

// lookup returns the cell from -> to, or 0. It is nil-safe.
func (b *Block) lookup(from, to string) byte {
	if b == nil {
		return 0
	}
	i, j := slices.Index(b.From, from), slices.Index(b.To, to)
	if i < 0 || j < 0 {
		return 0
	}
	return b.Cells[i][j]
}

func (t Table) block(p Port, service bool) *Block {
	for i := range t.Blocks {
		if t.Blocks[i].Port == p && t.Blocks[i].Service == service {
			return &t.Blocks[i]
		}
	}
	return nil
}

// CompareTables lists the cells where actual differs from expected: first
// in expected's order, then the cells only actual has. An actual '?' (the
// probe could not be made) matches any expected value; count those with
// Table.Count(CellUnprobeable).
func CompareTables(expected, actual Table) []Mismatch {
	var out []Mismatch
	for _, eb := range expected.Blocks {
		ab := actual.block(eb.Port, eb.Service)
		for i, from := range eb.From {
			for j, to := range eb.To {
				want, got := eb.Cells[i][j], ab.lookup(from, to)
				if got != want && got != CellUnprobeable {
					out = append(out, Mismatch{Port: eb.Port, Service: eb.Service, From: from, To: to, Expected: want, Actual: got})
				}
			}
		}
	}
	for _, ab := range actual.Blocks {
		eb := expected.block(ab.Port, ab.Service)
		for i, from := range ab.From {
			for j, to := range ab.To {
				if eb.lookup(from, to) == 0 {
					out = append(out, Mismatch{Port: ab.Port, Service: ab.Service, From: from, To: to, Actual: ab.Cells[i][j]})
				}
			}
		}
	}
	return out
}
