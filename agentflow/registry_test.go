package agentflow_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow"
)

// TestManagerRegistryIsBounded: a tenant with 20,000 sessions' worth of
// registry entries. The manager used to carry every live entry through
// continue-as-new (~300 bytes each: past Temporal's 2 MB payload limit at
// ~7k sessions, after which every report, lookup and fork of the tenant
// stopped). What it carries is bounded now; the sessions themselves are
// listed from Temporal's visibility (their memos), not from this state.
func TestManagerRegistryIsBounded(t *testing.T) {
	const sessions = 20_000
	e := newManagerEnv(t, func(in agentflow.ForkSessionInput) (agentflow.ForkResult, error) {
		return agentflow.ForkResult{}, errors.New("no forks here")
	})
	e.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: agentflow.ManagerWorkflowID("slack:T1:C1:1.1"), TaskQueue: agentflow.TaskQueue})
	in := agentflow.ManagerInput{Platform: "slack", Tenant: "T1", MaxUpdatesPerRun: 1}
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range sessions {
		th := fmt.Sprintf("slack:T1:C%04d:%d.%06d", i%500, 1700000000+i, i)
		in.Sessions = append(in.Sessions, agentflow.SessionEntry{
			ThreadKey: th, WorkflowID: agentflow.AgentWorkflowID(th), Title: fmt.Sprintf("fix the flaky test in package %d", i),
			Backend: "docker", Requester: fmt.Sprintf("U%08d", i%300), Created: created.Add(time.Duration(i) * time.Second),
			Status: agentflow.StatusIdle,
		})
	}
	const newest = "slack:T1:C0001:1800000000.000001"
	err := e.run(agentflow.SessionManagerWorkflowName, in,
		call(e, agentflow.ManagerUpdateCreate, agentflow.SessionEntry{ThreadKey: newest, Title: "the newest", Status: agentflow.StatusIdle},
			func(_ agentflow.SessionEntry, err error) {
				if err != nil {
					t.Error(err)
				}
			}),
	)
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("workflow ended with %v, want continue-as-new", err)
	}
	var next agentflow.ManagerInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(next)
	if limit := 512 << 10; len(data) > limit {
		t.Fatalf("continue-as-new carries %d bytes for %d sessions (limit %d): the registry grows with the tenant", len(data), sessions+1, limit)
	}
	found := false
	for _, s := range next.Sessions {
		found = found || s.ThreadKey == newest
	}
	if !found {
		t.Errorf("the newest session is not among the %d carried", len(next.Sessions))
	}
}
