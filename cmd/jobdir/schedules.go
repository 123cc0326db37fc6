package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobdir/jobdir/httpapi"
	"github.com/jobdir/jobdir/jobstore"
)

func (a *app) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Run jobs periodically: add, list, pause, resume, remove and fire schedules",
		Long: `A schedule makes a job at each tick of a cron spec, "every night at 03:00". It
is kept in the store: every "jobdir work" and "jobdir serve" process fires
the ticks that come while it runs (unless --no-schedules), and the tick's key
(schedule:NAME:TICK, the tick in RFC 3339 UTC) makes each tick one job however
many processes fire it. A tick is fired as long as one of them runs.

Specs are cron expressions (five fields: minute hour day-of-month month
day-of-week; six with seconds first), the descriptors @hourly, @daily,
@weekly, @monthly and @yearly, and @every DURATION, which ticks at the
multiples of DURATION since the Unix epoch ("@every 1h" on the hour, UTC).
They are read in --tz (an IANA zone; UTC by default), with its daylight
saving rules: a time the clocks skip does not tick that day, and a time they
repeat ticks twice.`,
		Example: `  jobdir schedule add nightly --cron '0 3 * * *' --tz Europe/Berlin -- ./backup.sh
  jobdir schedule add beat --cron '@every 30s' --overlap skip -- ./probe.sh
  jobdir schedule list
  jobdir schedule run nightly
  jobdir schedule pause nightly && jobdir schedule resume nightly
  jobdir schedule rm nightly`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.scheduleAddCommand(), a.scheduleListCommand(), a.schedulePauseCommand(true), a.schedulePauseCommand(false),
		a.scheduleRemoveCommand(), a.scheduleRunCommand())
	return cmd
}

// scheduler returns st as a jobstore.Scheduler.
func scheduler(st *cliStore) (jobstore.Scheduler, error) {
	sc, ok := st.Store.(jobstore.Scheduler)
	if !ok {
		return nil, fmt.Errorf("the store %s keeps no schedules", st.name)
	}
	return sc, nil
}

// scheduleErr says in words what went wrong with the schedule name.
func scheduleErr(name string, err error) error {
	switch {
	case errors.Is(err, jobstore.ErrScheduleExists):
		return fmt.Errorf("a schedule named %s exists: give --replace to replace it, or choose another name", name)
	case errors.Is(err, jobstore.ErrNotFound):
		return fmt.Errorf("no schedule is named %s (see jobdir schedule list)", name)
	}
	return err
}

// oneName checks that a schedule command got one NAME.
func oneName(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("%s needs one NAME, the schedule's", cmd.Name())
	}
	if err := jobstore.ValidateScheduleName(args[0]); err != nil {
		return usagef("%v", err)
	}
	return nil
}

func (a *app) scheduleAddCommand() *cobra.Command {
	var (
		spec, tz, kind, payload string
		catchUp, overlap        string
		window                  time.Duration
		replace                 bool
		jf                      jobFlags
	)
	cmd := &cobra.Command{
		Use:         "add NAME --cron SPEC [--tz ZONE] [flags] [--] PROGRAM [ARG...]",
		Annotations: map[string]string{createsStore: "yes"},
		Short:       "Add a schedule that runs a program (or makes a job of any kind) at each tick",
		Long: `Add the schedule NAME: at each tick of --cron SPEC, in --tz ZONE, a job of
kind "exec" runs PROGRAM with its ARGs in the current working directory, as
"jobdir submit" would, with the same job flags; write -- before PROGRAM, so
that its own flags are its. With --kind K (and
--payload JSON) the ticks make jobs of kind K instead, for the workers of a
program that embeds jobdir.

The first tick is the first after now. A schedule of that name is an error,
unless --replace, which replaces it (its ticks already fired are not fired
again).

--catch-up says what becomes of the ticks missed while no process fired them
(all were down, or the schedule was paused): one (the default) makes one job
for them all, keyed by the latest; skip drops them; all makes each, within
--catch-up-window (24h by default). The latest due tick always fires.
--overlap says what a tick does while the previous tick's job is queued or
running: allow (the default) runs it beside; skip drops it; queue holds it
until that job ends, and the ticks then run one after another.`,
		Example: `  jobdir schedule add nightly --cron '0 3 * * *' --tz Europe/Berlin -- ./backup.sh
  jobdir schedule add report --cron '@daily' --catch-up all --max-attempts 1 -- ./report.sh
  jobdir schedule add sync --cron '*/5 * * * *' --kind crm.sync --payload '{"full":false}'
  jobdir schedule add beat --cron '@every 10s' --overlap skip --replace -- ./probe.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("schedule add needs a NAME, then --cron SPEC and the PROGRAM to run (or --kind)")
			}
			if err := jobstore.ValidateScheduleName(args[0]); err != nil {
				return usagef("%v", err)
			}
			switch {
			case kind != "" && len(args) > 1:
				return usagef("give --kind or a PROGRAM to run, not both")
			case kind == "" && len(args) == 1:
				return usagef("schedule add %s needs the PROGRAM to run (or --kind K for jobs of another kind)", args[0])
			case kind == "" && payload != "":
				return usagef("--payload goes with --kind; a program's job has its own")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if spec == "" {
				return usagef("schedule add needs --cron SPEC, such as '0 3 * * *', @daily or '@every 1h'")
			}
			var job jobstore.Spec
			var err error
			if kind != "" {
				job = jobstore.Spec{Kind: kind}
				if payload != "" {
					job.Payload = json.RawMessage(payload)
				}
				err = jf.fill(cmd, &job)
			} else {
				job, err = jf.execSpec(cmd, args[1:])
			}
			if err != nil {
				return err
			}
			s := jobstore.Schedule{Name: args[0], Spec: spec, TZ: tz, Job: job, CatchUp: jobstore.CatchUp(catchUp),
				CatchUpWindow: window, Overlap: jobstore.Overlap(overlap)}
			if err := s.Validate(0); err != nil {
				return usagef("%v", err)
			}
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				sc, err := scheduler(st)
				if err != nil {
					return err
				}
				info, err := sc.AddSchedule(cmd.Context(), s, replace)
				if err != nil {
					return scheduleErr(s.Name, err)
				}
				fmt.Fprintf(a.stdout, "schedule %s added; its next tick is %s\n", info.Name, stamp(info.Next(time.Now()), time.Now()))
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec, "cron", "", "when it ticks: a cron `SPEC` such as '0 3 * * *' (five fields; six with seconds first), @daily, or '@every 1h'")
	f.StringVar(&tz, "tz", "", "the IANA time `ZONE` the spec is read in, such as Europe/Berlin (default UTC)")
	f.StringVar(&kind, "kind", "", "make jobs of this `KIND` instead of running a program")
	f.StringVar(&payload, "payload", "", "the `JSON` payload of the --kind jobs")
	f.StringVar(&catchUp, "catch-up", "", "what becomes of missed ticks: one (default), skip or all")
	durationVar(f, &window, "catch-up-window", 0, "with --catch-up all, how far back missed ticks are made up (default 24h)")
	f.StringVar(&overlap, "overlap", "", "a tick while the previous tick's job is queued or running: allow (default), skip or queue")
	f.BoolVar(&replace, "replace", false, "replace the schedule of that name, if there is one")
	jf.register(f)
	return cmd
}

func (a *app) scheduleListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the schedules, their next and last ticks",
		Long: `List every schedule: its name, spec and zone, its next tick (none while
paused), its last tick fired and that tick's job, and whether it is paused.
With --json, an array of the schedules as GET /v1/schedules sends them: name,
spec, tz, job, catch_up, catch_up_window, overlap, paused, created_at, next,
last (null for none) and last_job.`,
		Example: `  jobdir schedule list
  jobdir schedule list --json | jq -r '.[] | select(.paused) | .name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				sc, err := scheduler(st)
				if err != nil {
					return err
				}
				all, err := sc.Schedules(cmd.Context())
				if err != nil {
					return err
				}
				now := time.Now()
				views := make([]httpapi.Schedule, len(all))
				for i, info := range all {
					views[i] = httpapi.FromSchedule(info, now)
				}
				if asJSON {
					return writeJSON(a.stdout, views)
				}
				return printSchedules(a.stdout, views, now)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the schedules as JSON")
	return cmd
}

// printSchedules writes the schedules for people.
func printSchedules(w io.Writer, views []httpapi.Schedule, now time.Time) error {
	if len(views) == 0 {
		_, err := fmt.Fprintln(w, `No schedules yet. Add one with "jobdir schedule add NAME --cron SPEC -- PROGRAM".`)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSPEC\tTZ\tNEXT\tLAST\tLAST JOB\tSTATE")
	for _, v := range views {
		next, last, state := "-", "-", "active"
		if v.Next != nil {
			next = agoCoarse(*v.Next, now)
		}
		if v.Last != nil {
			last = agoCoarse(*v.Last, now)
		}
		if v.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Spec, v.TZ, next, last, dash(v.LastJob), state)
	}
	return tw.Flush()
}

func (a *app) schedulePauseCommand(pause bool) *cobra.Command {
	use, short, done := "resume NAME", "Let a paused schedule tick again", "resumed"
	if pause {
		use, short, done = "pause NAME", "Stop a schedule's ticks, in every process, until it is resumed", "paused"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `. The ticks that come while a schedule is paused are missed: once
resumed, its --catch-up policy says what becomes of them. Pausing a paused
schedule, or resuming an active one, changes nothing.`,
		Example: "  jobdir schedule " + strings.Fields(use)[0] + " nightly",
		Args:    oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				sc, err := scheduler(st)
				if err != nil {
					return err
				}
				if _, err := sc.PauseSchedule(cmd.Context(), args[0], pause); err != nil {
					return scheduleErr(args[0], err)
				}
				fmt.Fprintf(a.stdout, "schedule %s %s\n", args[0], done)
				return nil
			})
		},
	}
}

func (a *app) scheduleRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "Remove a schedule: no tick of it fires from then on",
		Long: `Remove the schedule NAME: no process fires a tick of it from then on. The
jobs its ticks made stay, as they are.`,
		Example: "  jobdir schedule rm nightly",
		Args:    oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				sc, err := scheduler(st)
				if err != nil {
					return err
				}
				if err := sc.RemoveSchedule(cmd.Context(), args[0]); err != nil {
					return scheduleErr(args[0], err)
				}
				fmt.Fprintf(a.stdout, "schedule %s removed\n", args[0])
				return nil
			})
		},
	}
}

func (a *app) scheduleRunCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "run NAME",
		Short: "Make a schedule's job now, once, besides its ticks",
		Long: `Make the job of the schedule NAME now, once, as a tick would, keyed as a tick
of this second (schedule:NAME:NOW), and print its ID. Its ticks go on as
before; a paused schedule's job is made all the same.`,
		Example: "  jobdir schedule run nightly\n  jobdir wait \"$(jobdir schedule run nightly)\"",
		Args:    oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *cliStore) error {
				sc, err := scheduler(st)
				if err != nil {
					return err
				}
				info, err := sc.GetSchedule(cmd.Context(), args[0])
				if err != nil {
					return scheduleErr(args[0], err)
				}
				job, _, err := st.Submit(cmd.Context(), info.JobAt(time.Now()))
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(a.stdout, job.ID)
				return err
			})
		},
	}
}
