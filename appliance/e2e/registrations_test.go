package e2e

import (
	"fmt"
	"slices"
	"testing"
)

// TestRegistrationsOnlineFilter: with alice registered and bob, carol and
// dave not, ?online=true lists alice's binding and ?online=false the three
// accounts no phone is registered to (issue 14, item 4).
func TestRegistrationsOnlineFilter(t *testing.T) {
	apiPort := freePort(t)
	p := startPBX(t, pbxConfig{APIPort: apiPort, NoCDR: true, LogLevel: "info"})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}

	extensions := func(path string) []string {
		var list struct {
			Registrations []struct {
				Tenant    string `json:"tenant"`
				Extension string `json:"extension"`
				Username  string `json:"username"`
				Contact   string `json:"contact"`
			} `json:"registrations"`
		}
		api.getJSON(path, &list)
		var out []string
		for _, r := range list.Registrations {
			if r.Tenant != "demo" || r.Username == "" {
				t.Errorf("%s: row %+v lacks its tenant or account", path, r)
			}
			out = append(out, r.Extension)
		}
		slices.Sort(out)
		return out
	}

	if got := extensions("/v1/registrations?online=false"); !slices.Equal(got, []string{"100", "101", "102", "103"}) {
		t.Fatalf("before any REGISTER, offline: %v, want every account", got)
	}
	dir := scenarioDir(t, map[string]string{"alice.csv": credentials("alice")})
	registerUser(t, p, dir, "alice", freePort(t))

	if got := extensions("/v1/registrations?online=true"); !slices.Equal(got, []string{"100"}) {
		t.Errorf("online: %v, want [100]", got)
	}
	if got := extensions("/v1/registrations?online=false"); !slices.Equal(got, []string{"101", "102", "103"}) {
		t.Errorf("offline: %v, want [101 102 103]", got)
	}
	if got := extensions("/v1/registrations"); !slices.Equal(got, []string{"100", "101", "102", "103"}) {
		t.Errorf("unfiltered: %v, want one row per account", got)
	}
}
