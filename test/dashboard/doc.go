// Package dashboard holds the test that keeps the Grafana dashboard in
// deploy/grafana true to the metrics lockstep writes. It has no code of
// its own.
//
// The test reads the metric families from the code itself: every family
// the agent and the operator write goes through internal/promtext, either
// registered (Registry.NewCounter, Registry.NewHistogram) or written at
// scrape time (promtext.WriteHeader), and the test parses lockstep's
// sources for those calls. It then reads every PromQL expression of the
// dashboard and fails when one names a metric nothing writes (a renamed
// or removed metric leaves a panel empty without a word), and when a
// family has no panel and is not in the test's commented allow-list.
package dashboard
