//! The report as one self-contained HTML page (no network needed to view it): the table, the
//! history checker's verdicts, a time line per worker and latency plots, fenced run and control
//! side by side. The page is a `maud` template; the charts are SVG drawn by `plotters` and
//! inlined.

use std::error::Error;
use std::time::Duration;

use maud::{DOCTYPE, Markup, PreEscaped, html};
use plotters::prelude::*;

use crate::config::FaultKind;
use crate::history::{OpKind, OpOutcome, Operation, RunHistory};
use crate::report::{ChaosReport, Outcome, RunReport};

const WIDTH: u32 = 760;
const FONT: &str = "sans-serif";

const LEASE: RGBColor = RGBColor(158, 202, 225);
const EXPIRED: RGBColor = RGBColor(253, 174, 107);
const PAUSE: RGBAColor = RGBAColor(60, 60, 60, 0.45);
const ADMITTED: RGBColor = RGBColor(35, 139, 69);
const REFUSED: RGBColor = RGBColor(215, 25, 28);
const UNKNOWN: RGBColor = RGBColor(230, 140, 0);
const KILL: RGBColor = RGBColor(120, 0, 0);
const PARTITION: RGBColor = RGBColor(117, 107, 177);
const TERMINATE: RGBColor = RGBColor(140, 81, 10);

const STYLE: &str = "
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1600px; }
h1 { margin-bottom: 0.2em; }
.sub { color: #555; margin-top: 0; }
.outcome { font-weight: bold; padding: 0.5em 0.8em; border-radius: 4px; }
.pass { background: #e5f5e0; } .fail { background: #fde0dd; } .invalid { background: #fff3cd; }
table { border-collapse: collapse; }
td, th { padding: 2px 10px; border-bottom: 1px solid #eee; }
td.num, th { text-align: right; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
figure { margin: 0 0 1.2em 0; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: #444; font-size: 0.9em; }
.legend span { display: inline-block; margin-right: 1.2em; }
.swatch { display: inline-block; width: 1.1em; height: 0.8em; vertical-align: middle;
  margin-right: 0.3em; border: 1px solid #999; }
li.violation { color: #b00; }
";

/// Notes the laid-out size of each chart on its figure, so a headless browser's DOM dump shows
/// that the charts were rendered.
const SCRIPT: &str = "
for (const figure of document.querySelectorAll('figure[data-chart]')) {
  const svg = figure.querySelector('svg');
  if (svg) {
    const box = svg.getBoundingClientRect();
    figure.dataset.renderedWidth = Math.round(box.width);
    figure.dataset.renderedHeight = Math.round(box.height);
  }
}
";

type DrawResult<T = ()> = Result<T, Box<dyn Error>>;

/// The whole page.
pub(crate) fn render(report: &ChaosReport) -> String {
    let (fenced, control) = (&report.fenced, &report.control);
    let outcome_class = match report.outcome {
        Outcome::Pass => "pass",
        Outcome::Violations => "fail",
        Outcome::ControlFoundNothing => "invalid",
    };
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "fencelock chaos: " (report.backend) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "fencelock chaos" }
                p.sub { (report.backend) br; (report.settings_line()) }
                p class={ "outcome " (outcome_class) } { (report.outcome.explain()) }
                h2 { "Checks" }
                table {
                    thead { tr { th {} th { "fenced" } th { "control" } } }
                    tbody {
                        @for [label, a, b] in report.rows() {
                            tr { td { (label) } td.num { (a) } td.num { (b) } }
                        }
                    }
                }
                ul {
                    li { b { "fenced history: " } (fenced.linearizability) }
                    li { b { "control history: " } (control.linearizability) }
                    @for example in &fenced.verdict.examples {
                        li.violation { "violation: " (example) }
                    }
                }
                h2 { "Time line" }
                (legend(report.session_fault))
                div.pair {
                    (timeline_figure("timeline-fenced", "fenced run", fenced, report.ttl))
                    (timeline_figure("timeline-control", "control (no fencing)", control, report.ttl))
                }
                h2 { "Latency" }
                div.pair {
                    (latency_figure("latency-fenced-read", "fenced run: fenced reads", fenced, OpKind::Read))
                    (latency_figure("latency-control-peek", "control: unfenced reads (peek)", control, OpKind::Peek))
                    (latency_figure("latency-fenced-write", "fenced run: writes", fenced, OpKind::Write))
                    (latency_figure("latency-control-write", "control: writes", control, OpKind::Write))
                }
                p.sub {
                    "Every operation, with its invoke and complete times, is in history.jsonl \
                     next to this page (one JSON object per line). Times are seconds since the \
                     run's workers started; the dashed line marks when the faults started."
                }
                script { (PreEscaped(SCRIPT)) }
            }
        }
    };
    page.into_string()
}

fn swatch(color: &str, label: &str) -> Markup {
    html! {
        span { span.swatch style={ "background:" (color) } {} (label) }
    }
}

/// The time line's legend; a session fault shows by the name its backend gives it.
fn legend(session_fault: Option<&str>) -> Markup {
    html! {
        p.legend {
            (swatch("rgb(158,202,225)", "lease, within its ttl"))
            (swatch("rgb(253,174,107)", "lease held past its ttl"))
            (swatch("rgba(60,60,60,0.45)", "worker paused (SIGSTOP)"))
            (swatch("rgb(120,0,0)", "kill -9 (servers)"))
            (swatch("rgb(117,107,177)", "partition (servers)"))
            @if let Some(label) = session_fault {
                (swatch("rgb(140,81,10)", label))
            }
            br;
            "● read (upper row of a lane) ▲ write (lower row), at its answer: "
            span style="color:rgb(35,139,69)" { "admitted" } ", "
            span style="color:rgb(215,25,28)" { "refused as stale" } ", "
            span style="color:rgb(230,140,0)" { "no answer (at its invoke)" }
        }
    }
}

fn figure(id: &str, svg: DrawResult<String>, caption: Markup) -> Markup {
    html! {
        figure id=(id) data-chart="" {
            @match svg {
                Ok(svg) => (PreEscaped(svg)),
                Err(e) => p { "the chart could not be drawn: " (e.to_string()) },
            }
            figcaption { (caption) }
        }
    }
}

fn timeline_figure(id: &str, title: &str, run: &RunReport, ttl: Duration) -> Markup {
    let h = &run.history;
    let count = |kind: OpKind, outcome: &str| {
        h.operations
            .iter()
            .filter(|op| op.kind == kind && op.outcome.name() == outcome && op.process.is_some())
            .count()
    };
    let caption = html! {
        (title) ": " (h.leases.len()) " leases, "
        (h.faults.iter().filter(|f| f.kind == FaultKind::Pause).count()) " pauses, "
        (h.faults.iter().filter(|f| f.kind != FaultKind::Pause).count()) " faults on the servers; writes "
        (count(OpKind::Write, "ok")) " admitted, " (count(OpKind::Write, "stale")) " refused, "
        (count(OpKind::Write, "unknown")) " without an answer"
    };
    figure(id, timeline(h, ttl, title), caption)
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn lane_name(y: f64, lanes: usize) -> String {
    let nearest = y.round();
    if (y - nearest).abs() > 1e-6 || nearest < 0.0 {
        return String::new();
    }
    // Small non-negative integers: the cast is exact.
    let lane = nearest as usize;
    match lane.cmp(&lanes) {
        std::cmp::Ordering::Less => format!("worker {lane}"),
        std::cmp::Ordering::Equal => "servers".into(),
        std::cmp::Ordering::Greater => String::new(),
    }
}

fn outcome_color(outcome: OpOutcome) -> RGBColor {
    match outcome {
        OpOutcome::Ok => ADMITTED,
        OpOutcome::Stale { .. } => REFUSED,
        OpOutcome::Unknown => UNKNOWN,
    }
}

/// When the workers and the nemesis last did something (the final read, after the drain, is
/// left out so that the run fills the width).
fn activity_end(h: &RunHistory) -> f64 {
    let last = h
        .operations
        .iter()
        .filter(|op| op.process.is_some())
        .map(|op| op.complete_ns.unwrap_or(op.invoke_ns))
        .chain(h.leases.iter().map(|l| l.end_ns.unwrap_or(l.start_ns)))
        .chain(h.faults.iter().map(|f| f.end_ns))
        .max()
        .unwrap_or(h.end_ns);
    secs(last).max(0.001)
}

/// Only the powers of ten of a log axis are labelled.
fn power_of_ten(y: &f64) -> String {
    let exponent = y.log10();
    if (exponent - exponent.round()).abs() < 1e-9 {
        format!("{y}")
    } else {
        String::new()
    }
}

/// Lanes: one per worker (leases, pauses, operations), one for the servers (faults).
fn timeline(h: &RunHistory, ttl: Duration, title: &str) -> DrawResult<String> {
    let lanes = h.workers;
    let top = lanes as f64 + 0.6;
    let end = activity_end(h);
    let height = 100 + 34 * (u32::try_from(lanes).unwrap_or(256) + 1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 16))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..end, -0.6f64..top)?;
        let name = |y: &f64| lane_name(*y, lanes);
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(lanes + 2)
            .y_label_formatter(&name)
            .max_light_lines(1)
            .x_label_formatter(&|x| format!("{x:.1}"))
            .x_desc("seconds")
            .label_style((FONT, 12))
            .draw()?;
        let from = secs(h.faults_from_ns);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(from, -0.6), (from, top)],
            BLACK.mix(0.5).stroke_width(1),
        )))?;

        let ttl = ttl.as_secs_f64();
        let mut within = Vec::new();
        let mut past = Vec::new();
        for lease in &h.leases {
            let y = lease.worker as f64;
            let start = secs(lease.start_ns);
            let stop = lease.end_ns.map_or(end, secs);
            let expiry = start + ttl;
            within.push(Rectangle::new(
                [(start, y - 0.3), (stop.min(expiry), y + 0.3)],
                LEASE.filled(),
            ));
            if stop > expiry {
                past.push(Rectangle::new(
                    [(expiry, y - 0.3), (stop, y + 0.3)],
                    EXPIRED.filled(),
                ));
            }
        }
        chart.draw_series(within)?;
        chart.draw_series(past)?;

        let thin = end / 400.0;
        let mut spans = Vec::new();
        for fault in &h.faults {
            let (start, stop) = (
                secs(fault.start_ns),
                secs(fault.end_ns).max(secs(fault.start_ns) + thin),
            );
            let (y, color) = match (fault.worker, fault.kind) {
                (Some(w), _) => (w as f64, PAUSE.filled()),
                (None, FaultKind::Kill) => (lanes as f64, KILL.filled()),
                (None, FaultKind::Partition) => (lanes as f64, PARTITION.filled()),
                (None, FaultKind::Terminate | FaultKind::Pause) => {
                    (lanes as f64, TERMINATE.filled())
                }
            };
            spans.push(Rectangle::new([(start, y - 0.42), (stop, y + 0.42)], color));
        }
        chart.draw_series(spans)?;

        let mut reads = Vec::new();
        let mut writes = Vec::new();
        for op in &h.operations {
            let Some(worker) = op.process else { continue };
            let x = secs(op.complete_ns.unwrap_or(op.invoke_ns));
            let y = worker as f64;
            let style = outcome_color(op.outcome).filled();
            match op.kind {
                OpKind::Read | OpKind::Peek => reads.push(Circle::new((x, y + 0.14), 3, style)),
                OpKind::Write => writes.push(TriangleMarker::new((x, y - 0.14), 4, style)),
            }
        }
        chart.draw_series(reads)?;
        chart.draw_series(writes)?;
        root.present()?;
    }
    Ok(svg)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Rounded index into a non-empty slice.
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn latency_figure(id: &str, title: &str, run: &RunReport, kind: OpKind) -> Markup {
    let ops: Vec<&Operation> = run
        .history
        .operations
        .iter()
        .filter(|op| op.kind == kind && op.process.is_some())
        .collect();
    let mut ms: Vec<f64> = ops
        .iter()
        .filter_map(|op| op.latency_ns())
        .map(|ns| ns as f64 / 1e6)
        .collect();
    ms.sort_by(f64::total_cmp);
    let unanswered = ops.len() - ms.len();
    let caption = html! {
        (title) ": " (ms.len()) " answered"
        @if !ms.is_empty() {
            ", median " (format!("{:.2}", percentile(&ms, 0.5))) " ms, p99 "
            (format!("{:.2}", percentile(&ms, 0.99))) " ms, max "
            (format!("{:.2}", percentile(&ms, 1.0))) " ms"
        }
        "; " (unanswered) " without an answer (not plotted)"
    };
    figure(
        id,
        latency(&ops, activity_end(&run.history), title),
        caption,
    )
}

/// Latency of each answered operation against when it was invoked, log scale.
fn latency(ops: &[&Operation], end: f64, title: &str) -> DrawResult<String> {
    let points: Vec<(f64, f64, OpOutcome)> = ops
        .iter()
        .filter_map(|op| {
            let ns = op.latency_ns()?;
            Some((secs(op.invoke_ns), (ns as f64 / 1e6).max(0.001), op.outcome))
        })
        .collect();
    let low = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let high = points.iter().map(|p| p.1).fold(0.0, f64::max);
    // At least a decade above and below, so powers of ten are labelled.
    let (low, high) = if points.is_empty() {
        (0.01, 10.0)
    } else {
        (
            10f64.powf((low / 1.5).log10().floor()),
            10f64.powf((high * 1.5).log10().ceil()),
        )
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 260)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 15))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..end, (low..high).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("seconds (invoke)")
            .y_desc("latency, ms")
            .max_light_lines(1)
            .x_label_formatter(&|x| format!("{x:.1}"))
            .y_label_formatter(&power_of_ten)
            .label_style((FONT, 12))
            .draw()?;
        chart.draw_series(
            points
                .iter()
                .map(|&(x, y, outcome)| Circle::new((x, y), 2, outcome_color(outcome).filled())),
        )?;
        root.present()?;
    }
    Ok(svg)
}
