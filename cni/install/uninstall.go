package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// UninstallResult reports what Uninstall did.
type UninstallResult struct {
	// Removed are the paths Uninstall deleted.
	Removed []string
	// Kept are files at lockstep's names that are not lockstep's, each
	// with the reason it stayed.
	Kept []string
}

// Uninstall removes what Install put in o.BinDir and o.ConfDir: the
// binary, the lockstep-cni symlink, the config list, and the temporary
// files an interrupted Install leaves. A config list at o.ConfName that
// does not run lockstep-cni is someone else's and stays (reported in
// Kept). It is idempotent: a second run removes nothing. It goes on past
// a path it cannot remove and returns the errors joined.
func Uninstall(o Options) (*UninstallResult, error) {
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir
	}
	if o.ConfDir == "" {
		o.ConfDir = DefaultConfDir
	}
	if o.ConfName == "" {
		o.ConfName = DefaultConfName
	}
	res := &UninstallResult{}
	var errs []error
	remove := func(path string) {
		err := os.Remove(path)
		switch {
		case err == nil:
			res.Removed = append(res.Removed, path)
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("remove %s: %w", path, err))
		}
	}

	confPath := filepath.Join(o.ConfDir, o.ConfName)
	switch ours, err := runsLockstep(confPath); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		res.Kept = append(res.Kept, fmt.Sprintf("%s: not a CNI config lockstep wrote (%v)", confPath, err))
	case !ours:
		res.Kept = append(res.Kept, confPath+": its plugins do not include "+PluginName)
	default:
		remove(confPath) // first: the runtime stops sending pods to lockstep
	}
	binPath := filepath.Join(o.BinDir, BinaryName)
	if info, err := os.Lstat(binPath); err == nil && info.IsDir() {
		errs = append(errs, fmt.Errorf("remove %s: it is a directory, not the lockstep binary; remove it by hand if it is lockstep's", binPath))
	} else {
		remove(binPath)
	}
	remove(filepath.Join(o.BinDir, PluginName))
	// What writeAtomic and symlinkAtomic leave when they are interrupted.
	for _, pattern := range []string{
		filepath.Join(o.ConfDir, "."+o.ConfName+".tmp-*"),
		filepath.Join(o.BinDir, "."+BinaryName+".tmp-*"),
		filepath.Join(o.BinDir, PluginName+".tmp"),
	} {
		tmps, _ := filepath.Glob(pattern)
		for _, tmp := range tmps {
			remove(tmp)
		}
	}
	slices.Sort(res.Removed)
	return res, errors.Join(errs...)
}

// runsLockstep reports whether the config list or config at path runs
// lockstep-cni.
func runsLockstep(path string) (bool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var conf struct {
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		return false, err
	}
	if conf.Type == PluginName {
		return true, nil
	}
	for _, p := range conf.Plugins {
		if p.Type == PluginName {
			return true, nil
		}
	}
	return false, nil
}
