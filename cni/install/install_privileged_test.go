package install

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"lockstep.dev/lockstep/test/testenv"
)

// foreign is a user and group nobody on a test machine is.
const foreign = 4242

// TestPrivilegedInstallFixesForeignOwner: a binary or config with the
// right content and a foreign owner was reported unchanged and kept its
// owner, who could then rewrite what the runtime runs as root. Install
// makes root the owner again and says so; a bin directory owned by
// someone else is refused.
func TestPrivilegedInstallFixesForeignOwner(t *testing.T) {
	testenv.Privileged(t)
	o := newInstall(t)
	o.owner = owner{} // root:root, as the DaemonSet runs it
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	bin, link, conf := filepath.Join(o.BinDir, BinaryName), filepath.Join(o.BinDir, PluginName), filepath.Join(o.ConfDir, DefaultConfName)
	for _, p := range []string{bin, link, conf} {
		if err := os.Lchown(p, foreign, foreign); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Changed, []string{bin, link, conf}) {
		t.Errorf("changed %v, want the binary, the symlink and the config, whose owners were fixed", res.Changed)
	}
	for _, p := range []string{bin, link, conf} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != 0 || s.Gid != 0 {
			t.Errorf("%s owned by %d:%d after install, want root:root", p, s.Uid, s.Gid)
		}
	}
	if res, err := Install(o); err != nil || len(res.Changed) != 0 {
		t.Errorf("third install changed %v (%v), want nothing", res.Changed, err)
	}

	if err := os.Chown(o.BinDir, foreign, 0); err != nil {
		t.Fatal(err)
	}
	_, err = Install(o)
	if !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "owned by uid 4242, not root") || !strings.Contains(err.Error(), "chown root:root") {
		t.Errorf("Install into a bin dir owned by uid %d = %v; want ErrUnsafeDir saying so", foreign, err)
	}
}
