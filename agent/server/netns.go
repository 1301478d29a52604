package server

import (
	"os"

	"lockstep.dev/lockstep/agent/api"
)

// netnsDetails tells the runtime's operator what a valid CNI_NETNS is.
const netnsDetails = "CNI_NETNS must name the pod sandbox's own network namespace; the plugin passes it to the agent open"

// netnsOf returns the pod network namespace op may use from the
// descriptors its request carried, verified, or an error that refuses the
// request. The caller closes files, except the one returned.
func (s *APIServer) netnsOf(op string, files []*os.File, fdErr error) (*os.File, error) {
	if fdErr != nil {
		return nil, fdErr
	}
	policy := fdPolicy[op]
	switch {
	case len(files) == 0 && policy == fdRequired:
		return nil, &api.Error{
			Code:    api.CodeInvalidNetNS,
			Msg:     "lockstep agent: " + op + " needs the pod's network namespace passed with the request, and none came",
			Details: "the plugin passes CNI_NETNS open over the socket (SCM_RIGHTS); install matching lockstep binaries (lockstep install-cni)",
		}
	case len(files) == 0:
		return nil, nil
	case policy == fdRefused:
		return nil, api.Errorf(api.CodeInvalidNetNS, "lockstep agent: operation %q takes no descriptor, and the request passed %d", op, len(files))
	case policy == fdIgnored:
		return nil, nil
	}
	if err := s.netnsCheck(files[0]); err != nil {
		return nil, &api.Error{Code: api.CodeInvalidNetNS, Msg: "lockstep agent refuses the namespace passed with " + op + ": " + err.Error(), Details: netnsDetails}
	}
	return files[0], nil
}

// closeAll closes every file of files.
func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
