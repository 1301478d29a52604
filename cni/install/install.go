package install

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"lockstep.dev/lockstep/cni/plugin"
)

// Defaults for Options.
const (
	DefaultBinDir   = "/opt/cni/bin"
	DefaultConfDir  = "/etc/cni/net.d"
	DefaultConfName = "10-lockstep.conflist"
	BinaryName      = "lockstep"
	PluginName      = "lockstep-cni"
	// DefaultCNIVersion is the cniVersion of the config list: the newest
	// every runtime lockstep meets accepts. containerd 1.6 and 1.7 speak
	// CNI up to 1.0.0 and refuse every ADD of a 1.1.0 list ("unsupported
	// CNI result version"); containerd 2.x and CRI-O accept 1.0.0 too.
	DefaultCNIVersion = "1.0.0"
)

// Options says what to install where.
type Options struct {
	// Source is the lockstep binary to copy; usually os.Executable().
	Source   string
	BinDir   string
	ConfDir  string
	ConfName string
	// Socket is written into the config when it differs from the default.
	Socket string
	// Portmap chains the reference portmap plugin after lockstep.
	Portmap bool
	// CNIVersion is the config list's cniVersion (DefaultCNIVersion when
	// empty): one of plugin.SupportedVersions. 1.1.0 lets runtimes that
	// implement them call STATUS and GC.
	CNIVersion string

	// owner owns what Install writes; the zero value is root:root.
	owner owner
}

// Result reports what Install changed.
type Result struct {
	Changed []string
}

// Install installs the binary, the symlink and the config list, owned by
// root with modes 0755 (binary) and 0644 (config). A file whose content is
// already right but whose owner or mode is not is fixed and reported as
// changed. Install refuses (ErrUnsafeDir) a bin or conf directory that
// anyone but root could write, before it writes anything: the runtime
// executes what is there as root for every pod.
func Install(o Options) (*Result, error) {
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir
	}
	if o.ConfDir == "" {
		o.ConfDir = DefaultConfDir
	}
	if o.ConfName == "" {
		o.ConfName = DefaultConfName
	}
	// Render first: a bad option changes nothing.
	conf, err := ConfList(o)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	for _, dir := range []string{o.BinDir, o.ConfDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	for _, dir := range []string{o.BinDir, o.ConfDir} {
		if err := checkDir(dir, o.owner); err != nil {
			return nil, err
		}
	}

	bin, err := os.ReadFile(o.Source)
	if err != nil {
		return nil, fmt.Errorf("read lockstep binary %s: %w", o.Source, err)
	}
	binPath := filepath.Join(o.BinDir, BinaryName)
	if changed, err := writeAtomic(binPath, bin, 0o755, o.owner); err != nil {
		return nil, err
	} else if changed {
		res.Changed = append(res.Changed, binPath)
	}

	linkPath := filepath.Join(o.BinDir, PluginName)
	if changed, err := symlinkAtomic(BinaryName, linkPath, o.owner); err != nil {
		return nil, err
	} else if changed {
		res.Changed = append(res.Changed, linkPath)
	}

	confPath := filepath.Join(o.ConfDir, o.ConfName)
	if changed, err := writeAtomic(confPath, conf, 0o644, o.owner); err != nil {
		return nil, err
	} else if changed {
		res.Changed = append(res.Changed, confPath)
	}
	return res, nil
}

// ConfList renders the network config list lockstep installs, from o's
// Socket, Portmap and CNIVersion.
func ConfList(o Options) ([]byte, error) {
	version := o.CNIVersion
	if version == "" {
		version = DefaultCNIVersion
	}
	if !slices.Contains(plugin.SupportedVersions, version) {
		return nil, fmt.Errorf("render config: lockstep-cni does not speak CNI version %q; choose one of %s (%s for containerd 1.6 and 1.7, 1.1.0 for runtimes that call STATUS and GC)",
			version, strings.Join(plugin.SupportedVersions, ", "), DefaultCNIVersion)
	}
	conf := map[string]any{"type": PluginName}
	if o.Socket != "" {
		if !filepath.IsAbs(o.Socket) {
			return nil, fmt.Errorf("render config: socket %q must be an absolute path", o.Socket)
		}
		conf["socket"] = o.Socket
	}
	plugins := []any{conf}
	if o.Portmap {
		plugins = append(plugins, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
	}
	out, err := json.MarshalIndent(map[string]any{
		"cniVersion": version,
		"name":       "lockstep",
		"plugins":    plugins,
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render config: %w", err)
	}
	return append(out, '\n'), nil
}

// writeAtomic replaces path with data, owned by o with mode, unless it is
// already a regular file holding exactly that; then it only fixes its
// owner and mode. It reports whether anything changed.
func writeAtomic(path string, data []byte, mode os.FileMode, o owner) (bool, error) {
	if changed, same, err := fixIfSame(path, data, mode, o); same {
		return changed, err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	st, err := tmp.Stat()
	if err == nil {
		_, err = fixOwnerMode(tmp, st, o, mode)
	}
	if err == nil && !ownersApply() {
		err = tmp.Chmod(mode)
	}
	if err != nil {
		tmp.Close()
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("replace %s: %w", path, err)
	}
	return true, syncDir(dir)
}

// fixIfSame reports whether path is a regular file holding exactly data
// (same) and, if so, gives it owner o and mode, reporting whether it had
// to (changed). Anything else (missing, a symlink, other content) is not
// the same, and is replaced.
func fixIfSame(path string, data []byte, mode os.FileMode, o owner) (changed, same bool, err error) {
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		return false, false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, false, nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != int64(len(data)) {
		return false, false, nil
	}
	have, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(have, data) {
		return false, false, nil
	}
	changed, err = fixOwnerMode(f, st, o, mode)
	if err == nil && !ownersApply() {
		err = f.Chmod(mode)
	}
	return changed, true, err
}

// symlinkAtomic points path at target, owned by o, unless it already is.
func symlinkAtomic(target, path string, o owner) (bool, error) {
	if cur, err := os.Readlink(path); err == nil && cur == target {
		return fixLinkOwner(path, o)
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return false, fmt.Errorf("create symlink %s: %w", path, err)
	}
	if _, err := fixLinkOwner(tmp, o); err != nil {
		os.Remove(tmp)
		return false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("replace %s: %w", path, err)
	}
	return true, syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
