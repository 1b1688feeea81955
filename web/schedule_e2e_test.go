package web_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobtype"
)

// A cron schedule shows its expression and the time zone it is read in,
// never "—"; its next run's time in that zone is the next run's tooltip.
// An every schedule shows its period as before.
func TestACronScheduleShowsItsExpressionAndZone(t *testing.T) {
	ctx, base, _ := startLiveWithRules(t, 2*time.Minute, jobtype.Rules{Schedules: []jobtype.Schedule{
		{Name: "nightly-digest", Kind: "digest.send", Queue: "reports", Every: time.Hour},
		{Name: "warehouse-export", Kind: "report.export", Queue: "reports", Cron: "30 2 * * 1-5", Timezone: "Europe/Amsterdam"},
		{Name: "daily-cleanup", Kind: "cleanup", Queue: "reports", Cron: "@daily"},
	}})

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	cron := `tr[data-schedule="warehouse-export"]`
	p.waitFor("the cron schedule's expression and zone", textIs(cron+" .every .cron", "30 2 * * 1-5")+" && "+textIs(cron+" .every .zone", "Europe/Amsterdam"))
	p.waitFor("its next run's time in that zone, as its tooltip", `/T02:30:00\+0[12]:00 \(Europe\/Amsterdam\)$/.test(document.querySelector(`+"`"+cron+" .next-run`"+`).title)`)
	p.waitFor("a cron in UTC says so", textIs(`tr[data-schedule="daily-cleanup"] .every .cron`, "@daily")+" && "+textIs(`tr[data-schedule="daily-cleanup"] .every .zone`, "UTC"))
	p.waitFor("the every schedule's period", textIs(`tr[data-schedule="nightly-digest"] .every`, "1h"))
	p.waitFor("no schedule says —", `![...document.querySelectorAll("#schedules .every")].some((e) => e.textContent.includes("—"))`)
}
