//! Owns the fleet from the database: the stored fleet records a query selects (SQL filters on
//! indexed time and board), decoded on worker threads and aggregated in name order by the
//! usbperf library's own fleet code, so the tables, learned thresholds and HTML page are
//! those `usbperf-matrix fleet` makes from a directory of the same reports.
//!
//! The one difference is what the filters leave out: a directory run reads every file and
//! lists those `--since` / `--board` dropped under `skipped`; here SQL never reads them, so
//! `skipped` holds only unfinished runs of the selection.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use usbperf_fleet::aggregate::{Dimension, FleetOptions, FleetSummary};
use usbperf_fleet::load::{LoadOptions, Outcome, Skip};
use usbperf_fleet::partial::Summarizer;
use usbperf_fleet::records::aggregate_outcomes;
use usbperf_fleet::stats::bucket_start;
use usbperf_fleet::stored;
use usbperf_fleet::summary::FileIssue;
use usbperf_fleet::thresholds::{render_snippet, suggest, SuggestOptions};
use usbperf_fleet::{html, text, FleetError};

use crate::store::{FleetFilter, FleetRow, FoldScope, Store, StoreError, SummaryFilter};
use crate::summaries::{trend_span, SPANS};

#[derive(Debug, thiserror::Error)]
pub enum FleetDbError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The filter left out every stored report (the boards stored are listed).
    #[error("{0}")]
    NothingMatched(String),
    #[error(transparent)]
    Fleet(#[from] FleetError),
}

/// Which reports, grouped how.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FleetQuery {
    pub since: Option<DateTime<Utc>>,
    pub board: Option<String>,
    pub group_by: Vec<Dimension>,
    pub compare_builds: bool,
    /// Follow each flash part's wear across the stored reports.
    pub wear: bool,
    /// Read every stored record (`--exact`) instead of the summaries.
    pub exact: bool,
}

impl Default for FleetQuery {
    fn default() -> Self {
        FleetQuery {
            since: None,
            board: None,
            group_by: FleetOptions::default().group_by,
            compare_builds: false,
            wear: false,
            exact: false,
        }
    }
}

/// The summary, and the boards it holds (for `--suggest-thresholds`' one-board rule).
pub struct FleetAnswer {
    pub summary: FleetSummary,
    pub boards: Vec<String>,
}

/// Rows decoded per batch: enough to keep both workers busy, few enough that memory holds
/// only a batch of decoded records beside the rows.
const BATCH: usize = 2048;

fn decode(i: u32, row: &FleetRow) -> Outcome {
    let path = PathBuf::from(&row.file);
    match row.kind.as_str() {
        "record" => match crate::record::decode(i, &row.record) {
            Ok(r) => Outcome::Record(Box::new(r)),
            Err(e) => Outcome::Error(FleetError::Malformed {
                path,
                msg: format!("its stored fleet record does not decode: {e}"),
            }),
        },
        "unfinished" => Outcome::Skipped {
            path,
            why: Skip::Unfinished {
                status: row.body.clone(),
            },
        },
        _ => Outcome::Error(FleetError::Malformed {
            path,
            msg: row.body.clone(),
        }),
    }
}

/// Aggregates `rows` (sorted) in order while worker threads decode the batches ahead:
/// worker `t` decodes batches `t`, `t + T`, … and the aggregating thread takes batch `b`
/// from worker `b % T`, so decoding overlaps the (sequential) aggregation and the order is
/// the rows'. Each worker runs at most two batches ahead, which bounds memory, and drops
/// its rows once decoded: the stored records (180 MB over 100,000 reports) are not all
/// held until the end.
fn aggregate_rows(
    opts: FleetOptions,
    files: Vec<PathBuf>,
    rows: Vec<FleetRow>,
) -> usbperf_fleet::aggregate::Accumulator {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n_batches = rows.len().div_ceil(BATCH);
    // Worker t's batches, in order: (index of the first row, rows).
    let mut owned: Vec<Vec<(usize, Vec<FleetRow>)>> = (0..workers).map(|_| Vec::new()).collect();
    let mut rows = rows.into_iter();
    for b in 0..n_batches {
        owned[b % workers].push((b * BATCH, rows.by_ref().take(BATCH).collect()));
    }
    std::thread::scope(|s| {
        let mut rx = Vec::with_capacity(workers);
        for mine in owned {
            let (tx, r) = std::sync::mpsc::sync_channel::<Vec<Outcome>>(2);
            rx.push(r);
            s.spawn(move || {
                for (base, batch) in mine {
                    let out: Vec<Outcome> = batch
                        .iter()
                        .enumerate()
                        .map(|(k, r)| decode((base + k) as u32, r))
                        .collect();
                    drop(batch);
                    if tx.send(out).is_err() {
                        break;
                    }
                }
            });
        }
        let ordered = (0..n_batches).flat_map(|b| {
            rx[b % workers]
                .recv()
                .expect("a decoding worker sends every batch it owns")
        });
        aggregate_outcomes(opts, files, ordered)
    })
}

/// The first day of a span of `span` days that starts on or after `day`.
fn align_up(day: i32, span: i32) -> i32 {
    let start = bucket_start(day, span);
    if start == day {
        day
    } else {
        start + span
    }
}

/// Unfinished runs and unreadable reports listed by a query from summaries (all are counted
/// in `files`).
const ISSUES_LISTED: usize = 1000;

/// The fleet `q` selects: from the stored summaries, merged per board and day or week, so
/// its cost grows with the days and groups selected, not with the reports; from every
/// stored record with `q.exact`, and for wear, which follows single parts. `--since` takes
/// whole days (UTC) from summaries.
pub fn fleet(store: &dyn Store, q: &FleetQuery) -> Result<FleetAnswer, FleetDbError> {
    if q.exact || q.wear {
        return fleet_exact(store, q);
    }
    // What was stored since the last fold is folded first: a query sees every report
    // acknowledged before it.
    store.fleet_fold(FoldScope::Query, &mut |_, _| {})?;
    let Some(gen) = store.fleet_generations()?.serving else {
        // This build's summaries are still being built, too far from done for a query.
        let total = store.count()?;
        let queued = store.fleet_queued()?;
        return Err(FleetDbError::Store(StoreError::Building {
            folded: total.saturating_sub(queued),
            total,
        }));
    };
    let since_day = q.since.map(usbperf_fleet::stats::epoch_day);
    let board = q.board.as_deref().map(str::trim);
    let span = store.fleet_summary_days(gen, since_day, board)?;
    let opts = FleetOptions {
        group_by: q.group_by.clone(),
        compare_builds: q.compare_builds,
        load: LoadOptions {
            since: q.since,
            board: q.board.clone(),
            threads: 0,
        },
        ..FleetOptions::default()
    };
    let mut sum = Summarizer::new(&opts, span);
    let mut damaged = None;
    {
        let board = board.map(str::to_string);
        // The whole summaries: the fewest rows of nested spans that cover the days from
        // `since_day` on (days up to the first whole week, weeks up to the first whole 13
        // weeks, those up to the first whole year, then years).
        // From the first report on: the years alone.
        let first = if since_day.is_some() {
            0
        } else {
            SPANS.len() - 1
        };
        let mut from = since_day;
        for (i, span) in SPANS.iter().enumerate().skip(first) {
            let until = match (from, SPANS.get(i + 1)) {
                (Some(d), Some(&next)) => Some(align_up(d, next)),
                _ => None,
            };
            if from.is_some() && from == until {
                continue;
            }
            let f = SummaryFilter {
                gen,
                span: *span,
                from_day: from,
                until_day: until,
                board: board.clone(),
            };
            store.fleet_summaries(&f, &mut |_, board, bytes| {
                match stored::decode(&bytes) {
                    Ok(bd) => sum.add(&board, &bd),
                    Err(e) => damaged = Some(e),
                }
                Ok(())
            })?;
            if until.is_none() {
                break;
            }
            from = until;
        }
        // The trend: a row per bucket, in order; the days of a first week the query starts
        // inside come from the days' rows.
        let bucket = sum.bucket_days();
        let mut read_trend = |span: i32, from_day, until_day| {
            let f = SummaryFilter {
                gen,
                span: trend_span(span),
                from_day,
                until_day,
                board: board.clone(),
            };
            store.fleet_summaries(&f, &mut |start, board, bytes| {
                match stored::decode_trend(&bytes) {
                    Ok(t) => sum.add_trend(start, &board, &t),
                    Err(e) => damaged = Some(e),
                }
                Ok(())
            })
        };
        let first_bucket = since_day.map(|d| align_up(d, bucket));
        if let (Some(d), Some(w)) = (since_day, first_bucket) {
            if d < w {
                read_trend(1, Some(d), Some(w))?;
            }
        }
        read_trend(bucket, first_bucket, None)?;
    }
    if let Some(e) = damaged {
        return Err(FleetDbError::Store(StoreError::Summary(format!(
            "a stored fleet summary does not read ({e}): rebuild the summaries with \
             `usbperf-collect fleet-rebuild --db URL`"
        ))));
    }
    let filter = FleetFilter {
        since_ns: q.since.and_then(|t| t.timestamp_nanos_opt()),
        board: q.board.clone(),
    };
    let (issue_rows, issues) = store.fleet_issues(&filter, ISSUES_LISTED)?;
    if sum.reports() == 0 {
        // Nothing summarised: the records say why (a filter, or nothing usable), as they
        // always did.
        return fleet_exact(store, q);
    }
    let mut errors = Vec::new();
    let mut skipped = Vec::new();
    for row in issue_rows {
        let file = PathBuf::from(&row.file);
        if row.kind == "unfinished" {
            skipped.push(FileIssue {
                issue: Skip::Unfinished { status: row.body }.to_string(),
                file,
                kind: "unfinished",
            });
        } else {
            errors.push(FileIssue {
                issue: FleetError::Malformed {
                    path: file.clone(),
                    msg: row.body,
                }
                .to_string(),
                file,
                kind: "unreadable",
            });
        }
    }
    let several: BTreeMap<String, usize> = store
        .fleet_several_keys(gen)?
        .into_iter()
        .map(|(u, n)| (u, n.max(0) as usize))
        .collect();
    let boards = sum.boards();
    let files = sum.reports() as usize + issues as usize;
    Ok(FleetAnswer {
        summary: sum.finish(files, errors, skipped, &several),
        boards,
    })
}

/// The fleet `q` selects, aggregated from every stored record in name order: exactly what
/// `usbperf-matrix fleet` gives for a directory of the same reports.
pub fn fleet_exact(store: &dyn Store, q: &FleetQuery) -> Result<FleetAnswer, FleetDbError> {
    // Reports stored before the fleet table existed get their records now, once.
    store.fleet_backfill()?;
    let filter = FleetFilter {
        since_ns: q.since.and_then(|t| t.timestamp_nanos_opt()),
        board: q.board.clone(),
    };
    let mut rows = store.fleet_rows(&filter)?;
    // In name order, as a directory run reads its files: the first of two copies counts,
    // and the write curves kept are the first ones. Sorted here, not by SQL: PostgreSQL
    // orders text by the database's collation, a directory by bytes.
    rows.sort_unstable_by(|a, b| a.file.cmp(&b.file));
    if rows.is_empty() && (q.since.is_some() || q.board.is_some()) {
        let boards = store.fleet_boards()?;
        let total: u64 = boards.iter().map(|b| b.1).sum();
        let list = boards
            .iter()
            .map(|(b, n)| {
                format!(
                    "{:?} ({n})",
                    b.as_deref()
                        .unwrap_or(usbperf_fleet::extract::UNKNOWN_BOARD)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        return Err(FleetDbError::NothingMatched(format!(
            "no report matched --since / --board among the {total} stored; the boards stored \
             (reports): {list} (--board takes the board exactly as listed)"
        )));
    }
    let files: Vec<PathBuf> = rows.iter().map(|r| PathBuf::from(&r.file)).collect();
    let opts = FleetOptions {
        group_by: q.group_by.clone(),
        compare_builds: q.compare_builds,
        wear: q.wear,
        load: LoadOptions {
            since: q.since,
            board: q.board.clone(),
            threads: 0,
        },
        ..FleetOptions::default()
    };
    let acc = aggregate_rows(opts, files, rows);
    if let Some(e) = acc.nothing_matched() {
        return Err(e.into());
    }
    let boards = acc.boards();
    Ok(FleetAnswer {
        summary: acc.finish(),
        boards,
    })
}

/// Output formats of `usbperf-collect fleet` (those of `usbperf-matrix fleet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Text,
    Json,
    Html,
}

/// The width of the text page's lines.
const TEXT_WIDTH: usize = 80;

/// The summary as `usbperf-matrix fleet --format …` prints it. The HTML page links each
/// outlier's report as `<link_prefix><report_id>.<format>`: the file the database's export
/// writes beside the page (prefix ""), or the report the page server serves ("reports/").
pub fn render(v: &FleetAnswer, format: Format, link_prefix: &str) -> String {
    let sopts = SuggestOptions::default();
    match format {
        // Served as text/plain: what a terminal would act on is shown escaped, as the unit's
        // own console output is.
        // Fitted to 80 columns: the page is read with curl on a serial or SSH console.
        // Escaped first, then fitted, as the unit's console text is: an escape takes columns.
        Format::Text => {
            let body = text::render_table(&v.summary, TEXT_WIDTH);
            let body = usbperf_report::untrusted::for_terminal(&body);
            let body = usbperf_report::words::without_os_codes(&body);
            usbperf_report::out::fit(&body, TEXT_WIDTH).into_owned()
        }
        // Serialising plain data to a String cannot fail.
        Format::Json => serde_json::to_string_pretty(&v.summary).unwrap_or_default() + "\n",
        Format::Html => {
            let link = |p: &std::path::Path| format!("{link_prefix}{}", p.display());
            html::render_html_linked(&v.summary, &suggest(&v.summary, &sopts), &link)
        }
    }
}

/// `--suggest-thresholds`: the board-profile snippet, for a fleet of one board.
pub fn render_thresholds(v: &FleetAnswer, margin: f64) -> Result<String, FleetError> {
    let sopts = SuggestOptions {
        margin,
        ..SuggestOptions::default()
    };
    match v.boards.len() {
        0 => Err(FleetError::Empty),
        1 => Ok(render_snippet(
            &v.boards[0],
            &v.summary,
            &suggest(&v.summary, &sopts),
            &sopts,
        )),
        _ => Err(FleetError::ManyBoards(v.boards.clone())),
    }
}
