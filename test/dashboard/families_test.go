package dashboard

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// promtextImport is the package every metric family is written with.
const promtextImport = "lockstep.dev/lockstep/internal/promtext"

// family is one metric family the code writes.
type family struct {
	name, typ string // typ: counter, gauge or histogram
	at        string // FILE:LINE of the call that writes it
}

// writtenFamilies parses the non-test Go files under dirs (of every
// platform) and returns the metric families they register or write with
// package promtext, by name. A name the scan cannot read (neither a
// string literal, a constant, a parameter of a local helper called with
// literals, nor a field of a ranged literal table) is an error: the test
// would otherwise miss a family.
func writtenFamilies(dirs ...string) (map[string]family, error) {
	out := map[string]family{}
	var problems []string
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return fmt.Errorf("parse %s: %w", path, err)
			}
			s := &scan{fset: fset, file: f, out: out}
			if !s.usesPromtext() {
				return nil
			}
			s.collect()
			problems = append(problems, s.problems...)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(problems) > 0 {
		return out, fmt.Errorf("cannot read the metric name of:\n  %s", strings.Join(problems, "\n  "))
	}
	return out, nil
}

// scan reads the families of one file.
type scan struct {
	fset     *token.FileSet
	file     *ast.File
	out      map[string]family
	problems []string
}

func (s *scan) usesPromtext() bool {
	if s.file.Name.Name == "promtext" {
		return true
	}
	for _, imp := range s.file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == promtextImport {
			return true
		}
	}
	return false
}

// collect finds the calls that name a family: NewCounter(name, ...) and
// NewHistogram(name, ...) on a registry, and WriteHeader(w, name, help,
// typ).
func (s *scan) collect() {
	for _, decl := range s.file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		// The registry's own writer writes the families registered with
		// NewCounter and NewHistogram, which the scan reads where they
		// are registered.
		if s.file.Name.Name == "promtext" && fn.Recv != nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch name := calleeName(call); {
			case (name == "NewCounter" || name == "NewHistogram") && len(call.Args) >= 2:
				typ := strings.ToLower(strings.TrimPrefix(name, "New"))
				s.add(fn, call.Args[0], typ)
			case name == "WriteHeader" && len(call.Args) == 4 && s.isPromtext(call):
				typ := "unknown"
				if lit, ok := call.Args[3].(*ast.BasicLit); ok {
					typ, _ = strconv.Unquote(lit.Value)
				}
				s.add(fn, call.Args[1], typ)
			}
			return true
		})
	}
}

// calleeName is the name of the function or method call calls.
func calleeName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// isPromtext tells promtext.WriteHeader (or WriteHeader inside package
// promtext) from other WriteHeader methods (http, tar).
func (s *scan) isPromtext(call *ast.CallExpr) bool {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return s.file.Name.Name == "promtext"
	case *ast.SelectorExpr:
		x, ok := f.X.(*ast.Ident)
		return ok && x.Name == "promtext"
	}
	return false
}

func (s *scan) add(fn *ast.FuncDecl, arg ast.Expr, typ string) {
	at := s.fset.Position(arg.Pos())
	names, ok := s.resolve(fn, arg)
	if !ok {
		s.problems = append(s.problems, fmt.Sprintf("%s:%d: a %T", at.Filename, at.Line, arg))
		return
	}
	for _, n := range names {
		s.out[n] = family{name: n, typ: typ, at: fmt.Sprintf("%s:%d", at.Filename, at.Line)}
	}
}

// resolve returns the string values arg can have inside fn.
func (s *scan) resolve(fn *ast.FuncDecl, arg ast.Expr) ([]string, bool) {
	switch a := arg.(type) {
	case *ast.BasicLit:
		v, err := strconv.Unquote(a.Value)
		return []string{v}, err == nil
	case *ast.Ident:
		if v, ok := s.constant(a.Name); ok {
			return []string{v}, true
		}
		return s.helperArgs(fn, a.Name)
	case *ast.SelectorExpr:
		return s.tableField(fn, a)
	}
	return nil, false
}

// constant is the value of a package-level string constant of the file.
func (s *scan) constant(name string) (string, bool) {
	for _, decl := range s.file.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if n.Name == name && i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
						v, err := strconv.Unquote(lit.Value)
						return v, err == nil
					}
				}
			}
		}
	}
	return "", false
}

// helperArgs handles a local helper, `gauge := func(name, help string,
// ...) { promtext.WriteHeader(w, name, ...) }`: the values are the
// literals every call of gauge in fn passes for that parameter.
func (s *scan) helperArgs(fn *ast.FuncDecl, param string) ([]string, bool) {
	var values []string
	found, ok := false, true
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		as, isAssign := n.(*ast.AssignStmt)
		if !isAssign || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
			return true
		}
		lit, isFunc := as.Rhs[0].(*ast.FuncLit)
		helper, isIdent := as.Lhs[0].(*ast.Ident)
		if !isFunc || !isIdent {
			return true
		}
		index := paramIndex(lit.Type, param)
		if index < 0 {
			return true
		}
		found = true
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, isCall := n.(*ast.CallExpr)
			if id, isID := callee(call); isCall && isID && id == helper.Name && index < len(call.Args) {
				v, isLit := call.Args[index].(*ast.BasicLit)
				if !isLit {
					ok = false
					return true
				}
				name, err := strconv.Unquote(v.Value)
				ok = ok && err == nil
				values = append(values, name)
			}
			return true
		})
		return false
	})
	return values, found && ok && len(values) > 0
}

func callee(call *ast.CallExpr) (string, bool) {
	if call == nil {
		return "", false
	}
	id, ok := call.Fun.(*ast.Ident)
	if !ok {
		return "", false
	}
	return id.Name, true
}

// paramIndex is the position of the parameter named name, or -1.
func paramIndex(ft *ast.FuncType, name string) int {
	i := 0
	for _, field := range ft.Params.List {
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// tableField handles `for _, g := range []struct{ name, help string; ...
// }{{"lockstep_x", ...}, ...} { promtext.WriteHeader(w, g.name, ...) }`:
// the values are that field of every element of the literal table.
func (s *scan) tableField(fn *ast.FuncDecl, sel *ast.SelectorExpr) ([]string, bool) {
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return nil, false
	}
	var values []string
	found := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		rs, isRange := n.(*ast.RangeStmt)
		if !isRange || found {
			return !found
		}
		v, isIdent := rs.Value.(*ast.Ident)
		table, isLit := rs.X.(*ast.CompositeLit)
		if !isIdent || v.Name != x.Name || !isLit {
			return true
		}
		arr, isArr := table.Type.(*ast.ArrayType)
		st, isStruct := arr.Elt.(*ast.StructType)
		if !isArr || !isStruct {
			return true
		}
		index := -1
		i := 0
		for _, f := range st.Fields.List {
			for _, n := range f.Names {
				if n.Name == sel.Sel.Name {
					index = i
				}
				i++
			}
		}
		if index < 0 {
			return true
		}
		found = true
		for _, elt := range table.Elts {
			row, isRow := elt.(*ast.CompositeLit)
			if !isRow || index >= len(row.Elts) {
				found = false
				return false
			}
			e := row.Elts[index]
			if _, keyed := e.(*ast.KeyValueExpr); keyed {
				e = keyedField(row, sel.Sel.Name)
			}
			lit, isLit := e.(*ast.BasicLit)
			if !isLit {
				found = false
				return false
			}
			name, err := strconv.Unquote(lit.Value)
			if err != nil {
				found = false
				return false
			}
			values = append(values, name)
		}
		return false
	})
	return values, found
}

// keyedField is the value of the field named name in a keyed literal.
func keyedField(row *ast.CompositeLit, name string) ast.Expr {
	for _, e := range row.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == name {
				return kv.Value
			}
		}
	}
	return nil
}
