package plugin

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
)

// hints tell the operator what to do next when the agent's error carries
// no details of its own.
var hints = map[uint]string{
	api.CodePoolExhausted: "delete unused pods or give the agent a larger pool",
	api.CodeBusy:          "another ADD for this attachment is still running; the runtime retries",
	api.CodeCancelled:     "a DEL for this attachment arrived during the ADD; nothing was left wired",
	api.CodeInternal:      "see the lockstep agent's log on this node",
	api.CodeTryAgainLater: "check that the lockstep agent runs on this node",
	api.CodeInvalidNetNS:  "pass the pod sandbox's own network namespace as CNI_NETNS",
}

// agentError turns an agent client error into a CNI error with the same
// code, so the runtime sees the agent's verdict unchanged.
func agentError(err error) *types.Error {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		return &types.Error{Code: api.CodeInternal, Msg: err.Error(), Details: hints[api.CodeInternal]}
	}
	if apiErr.Code == api.CodeIncompatibleVersion {
		// An agent older than the plugin knows no cni-add; one that
		// speaks another API version refuses it. Either way the node
		// runs mismatched binaries until the agent's rollout installs
		// its own plugin, so the runtime should retry.
		return &types.Error{
			Code:    types.ErrTryAgainLater,
			Msg:     "the lockstep agent and the lockstep-cni plugin on this node are different versions: " + apiErr.Msg,
			Details: "upgrade the agent and the plugin together (the agent installs its own plugin with lockstep install-cni); the runtime retries",
		}
	}
	details := apiErr.Details
	if details == "" {
		details = hints[apiErr.Code]
	}
	return &types.Error{Code: apiErr.Code, Msg: apiErr.Msg, Details: details}
}

// kernelError reports a failure to wire or unwire the pod, CNI code 5.
func kernelError(details string, format string, args ...any) *types.Error {
	return &types.Error{Code: types.ErrIOFailure, Msg: fmt.Sprintf(format, args...), Details: details}
}

// addDetail appends a sentence to e's details.
func addDetail(e *types.Error, detail string) {
	if e.Details == "" {
		e.Details = detail
		return
	}
	e.Details += "; " + detail
}
