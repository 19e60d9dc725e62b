//! Snapshot tests of whole screens drawn into ratatui's TestBackend from fixed Model data, at
//! 80x24 and 160x50 (`cargo insta review` after an intended change).

use std::time::Duration;

use ratatui::{Terminal, backend::TestBackend, buffer::Buffer};

use super::theme::Theme;
use crate::app::{App, Msg, Overlay};
use crate::batch::qos::{QosBatch, QosSample, RequestSample, SyscallSample};
use crate::batch::wait::{IoRow, WaitRow};
use crate::batch::{Batch, Exit, ProcInfo};
use crate::os::details::Details;
use crate::os::host::HostInfo;

pub(crate) const MS: u64 = 1_000_000;

/// What a drawn buffer shows, one line per row, trailing blanks trimmed.
pub(crate) fn buffer_text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let line: String = (0..buf.area.width)
            .map(|x| buf[(x, y)].symbol().to_string())
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn text_with(app: &App, theme: Theme, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| super::render(app, &theme, f)).unwrap();
    buffer_text(t.backend().buffer())
}

fn text(app: &App, w: u16, h: u16) -> String {
    text_with(app, Theme::default(), w, h)
}

fn host() -> HostInfo {
    HostInfo {
        hostname: "db1".into(),
        kernel: "6.18.0".into(),
        uptime_s: 93_784,
        load: [0.52, 0.40, 0.31],
        cpu_busy_pct: Some(37.5),
        mem_total_kib: 24 * 1024 * 1024,
        mem_avail_kib: 20 * 1024 * 1024,
        psi: None,
        ..HostInfo::default()
    }
}

pub(crate) fn proc(pid: u32, comm: &str, cmdline: &str) -> ProcInfo {
    ProcInfo {
        pid,
        start_ticks: 1000 + u64::from(pid),
        comm: comm.into(),
        cmdline: cmdline.into(),
        uid: Some(0),
        kthread: false,
        ..Default::default()
    }
}

/// Interval `seq` of 50 ms; `rows` are (pid, 5 bins of ns). Each process waited for a CPU a
/// quarter as long as it ran, as on a busy machine.
pub(crate) fn batch(seq: u64, rows: &[(u32, [u64; 5])], procs: &[ProcInfo]) -> Batch {
    let b = Batch::build(seq, 10_000 * MS + seq * 50 * MS, 50 * MS)
        .bins(10 * MS)
        .wall_ms(1_764_590_400_000 + seq * 50)
        .cpus(2, 640)
        .with(|b| {
            b.procs = procs.to_vec();
            b.cost = crate::batch::SelfCost {
                cpu_ns: 400_000,
                bpf_ns: Some(60_000),
                bpf_runs: Some(1500),
                bpf_sampled: false,
            };
            b.wait = rows
                .iter()
                .map(|(pid, bins)| WaitRow {
                    pid: *pid,
                    ns: bins.iter().sum::<u64>() / 4,
                })
                .filter(|w| w.ns > 0)
                .collect();
            b.wait_stats.available = true;
            b.wait_stats.io_available = true;
        });
    rows.iter()
        .fold(b, |b, (pid, bins)| b.cpu(*pid, bins.iter().sum(), bins))
        .done()
}

pub(crate) fn app() -> App {
    let mut a = App::new(20, Duration::from_millis(50));
    a.host = Some(host());
    a.users.insert(0, "root".into());
    a.users.insert(1000, "alice".into());
    a
}

/// One process with a 20 ms burst every 200 ms, for 2 s.
fn one_process() -> App {
    let mut a = app();
    let p = proc(
        4242,
        "cruncher",
        "/usr/local/bin/cruncher --threads 1 --input /data/set",
    );
    for seq in 1..=40 {
        let bins = if seq % 4 == 0 {
            [0, 10 * MS, 10 * MS, 0, 0]
        } else {
            [0; 5]
        };
        a.update(Msg::Batch(Box::new(batch(
            seq,
            &[(4242, bins)],
            std::slice::from_ref(&p),
        ))));
    }
    a
}

pub(crate) fn qos_sample(pid: u32, exited: bool) -> QosSample {
    QosSample {
        pid,
        comm: "redis-server".into(),
        last: exited,
        exited,
        syscalls: vec![
            SyscallSample {
                nr: 232,
                count: 1000,
                total_ns: 40 * MS,
                max_ns: MS,
                hist: Some(vec![(500, 600), (560, 400)]),
            },
            SyscallSample {
                nr: 0,
                count: 1000,
                total_ns: 4 * MS,
                max_ns: 30_000,
                hist: Some(vec![(300, 900), (330, 100)]),
            },
            SyscallSample {
                nr: 1,
                count: 1000,
                total_ns: 6 * MS,
                max_ns: 40_000,
                hist: None,
            },
        ],
        requests: RequestSample {
            requests: 1000,
            total_ns: 12 * MS,
            max_ns: 90_000,
            hist: vec![(400, 700), (430, 250), (470, 50)],
            recvs: 1000,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A busy process, and a pinned server that exits after 1 s.
fn pinned_exited() -> App {
    let mut a = app();
    let busy = proc(100, "stress-ng", "stress-ng --cpu 1");
    let srv = proc(812, "redis-server", "/usr/bin/redis-server 127.0.0.1:6379");
    a.model.table.pin_pid(812);
    for seq in 1..=30 {
        let mut rows = vec![(100, [10 * MS; 5])];
        let mut procs = vec![busy.clone()];
        if seq <= 20 {
            rows.push((812, [MS, 2 * MS, MS, 0, MS]));
            procs.push(srv.clone());
        }
        let mut b = batch(seq, &rows, &procs);
        if seq <= 20 {
            b.pinned = vec![812];
            b.qos = QosBatch {
                procs: vec![qos_sample(812, seq == 20)],
                request_model: true,
                ..Default::default()
            };
        }
        if seq == 20 {
            b.exits.push(Exit {
                pid: 812,
                ts_ns: b.end_ns - MS,
            });
        }
        a.update(Msg::Batch(Box::new(b)));
    }
    a
}

#[test]
fn empty_80x24() {
    insta::assert_snapshot!(text(&app(), 80, 24));
}

#[test]
fn empty_160x50() {
    insta::assert_snapshot!(text(&app(), 160, 50));
}

#[test]
fn one_process_80x24() {
    let t = text(&one_process(), 80, 24);
    // The 20 ms bursts show as two full columns each.
    assert!(t.contains("\u{2588}\u{2588}   "), "{t}");
    insta::assert_snapshot!(t);
}

#[test]
fn one_process_160x50() {
    insta::assert_snapshot!(text(&one_process(), 160, 50));
}

#[test]
fn one_process_ascii() {
    let ascii = Theme {
        ascii: true,
        ..Theme::default()
    };
    let t = text_with(&one_process(), ascii, 80, 24);
    assert!(t.contains("@@   "), "{t}");
    assert!(t.is_ascii(), "{t}");
    let mut p = pinned_exited();
    p.overlay = Some(Overlay::Help);
    let wide = text_with(&p, ascii, 160, 50);
    assert!(wide.is_ascii(), "{wide}");
    insta::assert_snapshot!(t);
}

#[test]
fn pinned_exited_80x24() {
    let t = text(&pinned_exited(), 80, 24);
    assert!(t.contains("redis-server") && t.contains("(exited)"), "{t}");
    insta::assert_snapshot!(t);
}

#[test]
fn pinned_exited_160x50() {
    let t = text(&pinned_exited(), 160, 50);
    assert!(t.contains("QoS 812 redis-server [exited]"), "{t}");
    insta::assert_snapshot!(t);
}

#[test]
fn too_small() {
    let t = text(&one_process(), 30, 5);
    assert!(t.contains("terminal too small"), "{t}");
    insta::assert_snapshot!(t);
}

#[test]
fn help_and_details_overlays() {
    let mut a = one_process();
    a.overlay = Some(Overlay::Help);
    insta::assert_snapshot!("help_80x24", text(&a, 80, 24));
    let key = a.selected_entry().unwrap().key;
    a.overlay = Some(Overlay::Details(
        key,
        Some(Box::new(Details {
            pid: key.pid,
            comm: "cruncher".into(),
            cmdline: "/usr/local/bin/cruncher --threads 1 --input /data/set".into(),
            user: "root".into(),
            threads: Some(3),
            start_s: Some(1000.5),
            cgroup: "/system.slice/cruncher.service".into(),
            state: "R".into(),
            note: None,
        })),
    ));
    insta::assert_snapshot!("details_80x24", text(&a, 80, 24));
}

#[test]
fn filter_line_and_memory_notice() {
    let mut a = one_process();
    a.filter = "crunch".into();
    a.filter_editing = true;
    assert!(text(&a, 80, 24).contains("filter (name, cgroup or pid): crunch_"));
    a.filter_editing = false;
    a.status = Some(crate::app::NO_MEMORY.into());
    assert!(text(&a, 80, 24).contains(crate::app::NO_MEMORY));
}

/// `one_process` plus memory: the cruncher grows, and an idle cache holds 2 GiB without using
/// any CPU (so only the memory table shows it).
fn with_memory() -> App {
    let mut a = one_process();
    let cache = proc(77, "cached", "/usr/sbin/cached --size 2g");
    let mut b = batch(
        41,
        &[(4242, [10 * MS, 0, 0, 0, 0])],
        &[
            proc(
                4242,
                "cruncher",
                "/usr/local/bin/cruncher --threads 1 --input /data/set",
            ),
            cache,
        ],
    );
    b.mem = vec![
        crate::batch::MemRow {
            pid: 4242,
            rss_bytes: 512 << 20,
            rss_delta_bytes: 8 << 20,
        },
        crate::batch::MemRow {
            pid: 77,
            rss_bytes: 2 << 30,
            rss_delta_bytes: 0,
        },
    ];
    b.mem_stats.available = true;
    a.update(Msg::Batch(Box::new(b)));
    a
}

#[test]
fn memory_table_160x50() {
    let t = text(&with_memory(), 160, 50);
    assert!(t.contains("MEMORY by RES"), "{t}");
    // The idle cache is in the memory table although it used no CPU; growth per second of
    // the cruncher: 8 MiB in 50 ms.
    assert!(t.contains("cached"), "{t}");
    assert!(t.contains("+160M/s"), "{t}");
    insta::assert_snapshot!(t);
}

#[test]
fn memory_table_by_growth_after_m() {
    let mut a = with_memory();
    a.update(Msg::Input(crossterm::event::Event::Key(
        crossterm::event::KeyEvent::from(crossterm::event::KeyCode::Char('M')),
    )));
    let t = text(&a, 160, 50);
    assert!(t.contains("MEMORY by growth"), "{t}");
    // By growth only what grew is listed: the cruncher, not the idle cache.
    let pane = &t[t.find("MEMORY by growth").unwrap_or(0)..];
    assert!(pane.contains("cruncher") && !pane.contains("cached"), "{t}");
}

#[test]
fn memory_table_fits_80x24_below_the_process_table() {
    let t = text(&with_memory(), 80, 24);
    let table = t.find("COMMAND").unwrap_or(usize::MAX);
    let mem = t.find("MEMORY by RES").unwrap_or(0);
    assert!(table < mem, "{t}");
    // The process table keeps at least 13 rows above it.
    assert!(t[table..mem].lines().count() >= 14, "{t}");
    assert!(t.contains("cached"), "{t}");
}

#[test]
fn the_filter_applies_to_the_memory_table() {
    let mut a = with_memory();
    a.filter = "crunch".into();
    let t = text(&a, 160, 50);
    let pane = &t[t.find("MEMORY by RES").unwrap_or(0)..];
    assert!(pane.contains("cruncher") && !pane.contains("cached"), "{t}");
}

/// A command line longer than its column shows the program's name and arguments, not the start
/// of its directory path.
#[test]
fn a_long_path_gives_way_to_the_program_name() {
    let mut a = app();
    let p = proc(
        777,
        "server",
        "/srv/deploy/releases/2026-11-30T03-12-44Z/build/x86_64/bin/server --port 8080",
    );
    a.update(Msg::Batch(Box::new(batch(
        1,
        &[(777, [MS; 5])],
        std::slice::from_ref(&p),
    ))));
    let s = text(&a, 120, 40);
    let row = s.lines().find(|l| l.contains(" 777 ")).unwrap();
    assert!(row.contains("server --port 8080"), "{s}");
    assert!(!row.contains("/srv/deploy"), "{s}");
    // Wide enough, the whole line stays.
    let s = text(&a, 220, 40);
    let row = s.lines().find(|l| l.contains(" 777 ")).unwrap();
    assert!(row.contains(&*p.cmdline), "{s}");
}

/// A process starved of CPU, a quiet disk writer and a busy one: `W` and `I` rank by them,
/// and a wide table shows the disk columns.
#[test]
fn waits_and_disk_io_columns_and_sorts() {
    let mut a = app();
    let procs = [
        proc(300, "starved", "starved --needs-a-cpu"),
        proc(301, "writer", "writer --direct /data/log"),
        proc(302, "busy", "busy --spin"),
    ];
    for seq in 1..=20 {
        let mut b = batch(
            seq,
            &[
                (300, [MS, 0, 0, 0, 0]),
                (301, [0, MS / 10, 0, 0, 0]),
                (302, [10 * MS; 5]),
            ],
            &procs,
        );
        b.wait = vec![
            WaitRow {
                pid: 300,
                ns: 40 * MS,
            },
            WaitRow { pid: 302, ns: MS },
        ];
        b.io = vec![IoRow {
            pid: 301,
            read_bytes: 0,
            write_bytes: 5 << 20,
        }];
        a.update(Msg::Batch(Box::new(b)));
    }
    let order = |a: &App| -> Vec<u32> { a.table_rows().iter().map(|e| e.key.pid).collect() };
    assert_eq!(order(&a), vec![302, 300, 301]);
    a.update(Msg::Input(crossterm::event::Event::Key(
        crossterm::event::KeyEvent::from(crossterm::event::KeyCode::Char('W')),
    )));
    assert_eq!(order(&a)[0], 300, "W: the starved process first");
    a.update(Msg::Input(crossterm::event::Event::Key(
        crossterm::event::KeyEvent::from(crossterm::event::KeyCode::Char('I')),
    )));
    assert_eq!(
        order(&a)[0],
        301,
        "I: the writer first, though it barely runs"
    );
    let t = text(&a, 130, 30);
    // 5 MiB every 50 ms is 100 MiB/s written; 40 ms of every 50 is 80% waiting.
    let row = |pid: &str| t.lines().find(|l| l.contains(pid)).unwrap().to_string();
    assert!(row(" 301 ").contains("100M"), "{t}");
    assert!(row(" 300 ").contains(" 80.0"), "{t}");
    insta::assert_snapshot!("waits_and_io_130x30", t);
}

/// The host's pressure goes on the first line when it fits, and is left out when it does not.
#[test]
fn pressure_in_the_header_when_it_fits() {
    let mut a = one_process();
    a.host = Some(HostInfo {
        psi: Some(crate::os::host::Psi {
            cpu: 12.5,
            io: 0.3,
            memory: 0.0,
        }),
        ..host()
    });
    let wide = text(&a, 120, 30);
    assert!(
        wide.lines()
            .next()
            .unwrap()
            .contains("psi cpu 12.5 io 0.3 mem 0.0"),
        "{wide}"
    );
    let narrow = text(&a, 80, 24);
    assert!(!narrow.contains("psi"), "{narrow}");
}

/// A pinned process whose threads wait for a CPU: the QoS pane says how long, each time, and
/// behind whom.
#[test]
fn the_qos_pane_shows_run_queue_waits() {
    use crate::batch::wait::CULPRIT_IDLE;
    let mut a = app();
    let srv = proc(812, "redis-server", "/usr/bin/redis-server 127.0.0.1:6379");
    let hog = proc(900, "ffmpeg", "ffmpeg -i in.mkv out.mp4");
    a.model.table.pin_pid(812);
    for seq in 1..=20 {
        let mut b = batch(
            seq,
            &[(812, [MS; 5]), (900, [9 * MS; 5])],
            &[srv.clone(), hog.clone()],
        );
        b.pinned = vec![812];
        b.wait_stats.offcpu_available = true;
        b.wait_by = [(812, 900, 3 * MS), (812, CULPRIT_IDLE, MS)]
            .iter()
            .map(|&(pid, culprit, ns)| crate::batch::wait::WaitByRow { pid, culprit, ns })
            .collect();
        let mut s = qos_sample(812, false);
        // 90 waits of about 20 us and 10 of about 2 ms per interval.
        s.runq = crate::batch::qos::RunqSample {
            count: 100,
            total_ns: 90 * 20_000 + 10 * 2_000_000,
            max_ns: 2_100_000,
            hist: vec![
                (ebee_shared::qos::bucket(20_000) as u16, 90),
                (ebee_shared::qos::bucket(2_000_000) as u16, 10),
            ],
        };
        b.qos = QosBatch {
            procs: vec![s],
            request_model: true,
            ..Default::default()
        };
        a.update(Msg::Batch(Box::new(b)));
    }
    let t = text(&a, 160, 50);
    let line = t.lines().find(|l| l.contains("runq")).unwrap_or_default();
    assert!(line.contains("p50 20."), "{t}");
    assert!(
        line.contains("p99 2.0") && line.contains("max 2.10ms"),
        "{t}"
    );
    assert!(line.contains("(2000 waits)"), "{t}");
    let line = t
        .lines()
        .find(|l| l.contains("waits behind"))
        .unwrap_or_default();
    assert!(line.contains("ffmpeg 75%, wakeup latency 25%"), "{t}");
}

/// Two servers (a fast busy one and a slow quiet one) and a client that only talks: the
/// SERVERS pane under the process table, the network columns and sort, `S` for the full
/// table, `L` for p99 order, and `p` pinning the selected server.
#[test]
fn servers_pane_table_sorts_and_pin() {
    use crate::batch::servers::{NetRow, ServerRow, ServersStats};
    use crate::model::servers::ServerSort;
    use crossterm::event::{Event, KeyCode, KeyEvent};
    use ebee_shared::servers::bucket;
    let key =
        |a: &mut App, c: char| a.update(Msg::Input(Event::Key(KeyEvent::from(KeyCode::Char(c)))));
    let mut a = app();
    let procs = [
        proc(500, "redis-server", "redis-server *:6379"),
        proc(501, "nginx", "nginx: worker process"),
        proc(502, "redis-benchmark", "redis-benchmark -c 50"),
    ];
    let h = |v: u64, c: u32| (bucket(v) as u16, c);
    for seq in 1..=40 {
        let mut b = batch(
            seq,
            &[(500, [2 * MS; 5]), (501, [MS / 2; 5]), (502, [3 * MS; 5])],
            &procs,
        );
        b.servers = vec![
            ServerRow {
                pid: 500,
                requests: 1000,
                latency_ns: 1000 * 40_000,
                max_ns: 300_000,
                hist: Some(vec![h(30_000, 900), h(120_000, 100)]),
                conns: Some(50),
            },
            ServerRow {
                pid: 501,
                requests: 10,
                latency_ns: 10 * 9 * MS,
                max_ns: 12 * MS,
                hist: Some(vec![h(8 * MS, 9), h(12 * MS, 1)]),
                conns: Some(3),
            },
        ];
        b.net = vec![
            NetRow {
                pid: 502,
                rx_bytes: 200 << 10,
                tx_bytes: 100 << 10,
            },
            NetRow {
                pid: 500,
                rx_bytes: 100 << 10,
                tx_bytes: 200 << 10,
            },
            NetRow {
                pid: 501,
                rx_bytes: 1 << 10,
                tx_bytes: 50 << 10,
            },
        ];
        b.servers_stats = ServersStats {
            available: true,
            requests: 1010,
            ..Default::default()
        };
        a.update(Msg::Batch(Box::new(b)));
    }
    let t = text(&a, 160, 50);
    assert!(t.contains("SERVERS (2; S to enlarge)"), "{t}");
    // 1,000 requests every 50 ms: 20,000 per second; 300 KiB per 50 ms is 6 MiB/s.
    let line = |t: &str, s: &str| t.lines().find(|l| l.contains(s)).unwrap_or("").to_string();
    assert!(line(&t, "20000.0").contains("redis-server"), "{t}");
    assert!(line(&t, "  RX/s").contains("  TX/s"), "{t}");
    insta::assert_snapshot!("servers_pane_160x50", t);
    // N: by network bytes, the busier by CPU first where they are equal.
    key(&mut a, 'N');
    let order: Vec<u32> = a.table_rows().iter().map(|e| e.key.pid).collect();
    assert_eq!(order, vec![502, 500, 501], "equal bytes: CPU decides");
    // S: the SERVERS table takes the main area; busiest first, L puts the slowest first.
    key(&mut a, 'S');
    assert_eq!(a.main, crate::app::MainView::Servers);
    let rows: Vec<u32> = a.server_rows().iter().map(|s| s.pid).collect();
    assert_eq!(rows, vec![500, 501], "the client is no server");
    key(&mut a, 'L');
    assert_eq!(a.srv_sort, ServerSort::P99);
    assert_eq!(a.server_rows()[0].pid, 501);
    let t = text(&a, 80, 24);
    assert!(t.contains("SERVERS (2; over the last second"), "{t}");
    insta::assert_snapshot!("servers_table_80x24", t);
    // p pins the selected server (the slow one, first now).
    let e = key(&mut a, 'p');
    assert_eq!(e, crate::app::Effect::SetPins(vec![501]));
    key(&mut a, 'S');
    assert_eq!(a.main, crate::app::MainView::Processes);
}

/// The programs' share in the header is marked `~` when it is an estimate from the sampled
/// BPF statistics.
#[test]
fn a_sampled_bpf_cost_is_marked_as_an_estimate() {
    let mut a = app();
    let p = proc(4242, "cruncher", "cruncher");
    let mut b = batch(1, &[(4242, [MS; 5])], std::slice::from_ref(&p));
    b.cost.bpf_sampled = true;
    a.update(Msg::Batch(Box::new(b)));
    let t = text(&a, 120, 24);
    assert!(t.contains("(bpf~0.12%)"), "{t}");
}

/// Processes in three cgroups: the CGROUP column with short names, the cgroups table (`C`)
/// ranked by CPU with a removed cgroup marked, and Enter filtering the process table to one.
#[test]
fn cgroups_view_and_column() {
    use crossterm::event::{Event, KeyCode, KeyEvent};
    let key = |a: &mut App, k: KeyCode| a.update(Msg::Input(Event::Key(KeyEvent::from(k))));
    let id = "4f3a5c0d2b1e9f8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b";
    let docker = format!("/system.slice/docker-{id}.scope");
    let mut a = app();
    let in_cg = |mut p: ProcInfo, cg: &str| {
        p.cgroup = cg.into();
        p
    };
    let procs = [
        in_cg(
            proc(600, "postgres", "postgres: writer"),
            "/system.slice/postgresql.service",
        ),
        in_cg(proc(601, "java", "java -jar app.jar"), &docker),
        in_cg(
            proc(602, "bash", "-bash"),
            "/user.slice/user-1000.slice/session-4.scope",
        ),
    ];
    for seq in 1..=20 {
        let mut b = batch(
            seq,
            &[(601, [8 * MS; 5]), (600, [3 * MS; 5]), (602, [MS / 5; 5])],
            &procs,
        );
        b.cgroups = [
            (21, docker.as_str(), 40 * MS),
            (22, "/system.slice/postgresql.service", 15 * MS),
            (23, "/user.slice/user-1000.slice/session-4.scope", MS),
        ]
        .iter()
        .map(|&(id, path, cpu_ns)| crate::batch::cgroup::CgroupRow {
            id,
            path: path.into(),
            cpu_ns,
            wait_ns: cpu_ns / 4,
            rss_bytes: Some(cpu_ns * 100),
        })
        .collect();
        b.cgroup_stats.available = true;
        b.cgroup_stats.hierarchy = "v2".into();
        // postgres waited behind java (another cgroup) and behind its own threads.
        b.wait_stats.offcpu_available = true;
        b.wait_by = [(600, 601, 4 * MS), (600, 600, MS), (602, 601, MS)]
            .iter()
            .map(|&(pid, culprit, ns)| crate::batch::wait::WaitByRow { pid, culprit, ns })
            .collect();
        if seq == 20 {
            b.cgroups.retain(|c| c.id != 23);
            b.cgroups_removed = vec![23];
        }
        a.update(Msg::Batch(Box::new(b)));
    }
    let t = text(&a, 160, 50);
    let line = |t: &str, s: &str| t.lines().find(|l| l.contains(s)).unwrap_or("").to_string();
    assert!(line(&t, "java -jar").contains("4f3a5c0d2b1e"), "{t}");
    assert!(
        line(&t, "postgres: writer").contains("postgresql.serv"),
        "{t}"
    );
    key(&mut a, KeyCode::Char('C'));
    let t = text(&a, 80, 24);
    assert!(t.contains("CGROUPS (3, v2"), "{t}");
    let rows: Vec<String> = a.cgroup_rows().iter().map(|g| g.path.clone()).collect();
    assert_eq!(rows[0], docker, "busiest first");
    assert!(line(&t, "session-4").contains("(removed)"), "{t}");
    insta::assert_snapshot!("cgroups_table_80x24", t);
    // Wide enough: whom each cgroup waited behind.
    let t = text(&a, 120, 24);
    assert!(t.contains("WAITS BEHIND"), "{t}");
    assert!(
        line(&t, "postgresql.service").contains("4f3a5c0d2b1e 80%, itself 20%"),
        "{t}"
    );
    assert!(
        line(&t, "session-4.scope").contains("4f3a5c0d2b1e 100%"),
        "{t}"
    );
    let docker_row = a.cgroup_rows()[0].clone();
    assert!(docker_row.hold_pct > 0.0, "{docker_row:?}");
    // Enter on the second row: the process table, filtered to postgres's cgroup.
    key(&mut a, KeyCode::Down);
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.main, crate::app::MainView::Processes);
    assert_eq!(a.filter, "cg:/system.slice/postgresql.service");
    let pids: Vec<u32> = a.table_rows().iter().map(|e| e.key.pid).collect();
    assert_eq!(pids, vec![600]);
    // A plain filter matches a part of the cgroup too.
    a.filter = "user.slice".into();
    let pids: Vec<u32> = a.table_rows().iter().map(|e| e.key.pid).collect();
    assert_eq!(pids, vec![602]);
}

/// `H`: one row per thread with its own name and its process; `p` pins the process.
#[test]
fn threads_mode_lists_threads_and_pins_their_process() {
    use crossterm::event::{Event, KeyCode, KeyEvent};
    let key =
        |a: &mut App, c: char| a.update(Msg::Input(Event::Key(KeyEvent::from(KeyCode::Char(c)))));
    let mut a = app();
    let procs = [
        proc(700, "mysqld", "/usr/sbin/mysqld"),
        proc(800, "cron", "cron -f"),
    ];
    // Asking before any Batch carries threads: the source is told, the table stays processes.
    assert_eq!(key(&mut a, 'H'), crate::app::Effect::SetThreads(true));
    for seq in 1..=20 {
        let mut b = batch(seq, &[(700, [9 * MS; 5]), (800, [MS; 5])], &procs);
        let t = |tid, pid, comm: &str, per_bin| crate::batch::cgroup::ThreadRow {
            tid,
            pid,
            comm: comm.into(),
            ns: 5 * per_bin,
            bins: vec![per_bin; 5],
            ..Default::default()
        };
        b.threads = Some(vec![
            t(712, 700, "ib_io_wr-1", 6 * MS),
            t(700, 700, "mysqld", 3 * MS),
            t(800, 800, "cron", MS),
        ]);
        a.update(Msg::Batch(Box::new(b)));
    }
    let t = text(&a, 120, 24);
    assert!(t.contains("    TID"), "{t}");
    let first = a.table_rows()[0];
    assert_eq!((first.key.pid, first.tgid), (712, 700));
    assert!(t.contains("ib_io_wr-1 (700: mysqld)"), "{t}");
    insta::assert_snapshot!("threads_120x24", t);
    // A filter by pid keeps the process's threads.
    a.filter = "700".into();
    let tids: Vec<u32> = a.table_rows().iter().map(|e| e.key.pid).collect();
    assert_eq!(tids, vec![712, 700]);
    a.filter.clear();
    assert_eq!(key(&mut a, 'p'), crate::app::Effect::SetPins(vec![700]));
    assert_eq!(key(&mut a, 'H'), crate::app::Effect::SetThreads(false));
    assert_eq!(a.table_rows()[0].key.pid, 700);
}

/// A build under a shell: `make` (idle, known from the lineage) with two busy compilers.
fn build_tree() -> App {
    let mut a = app();
    let kid = |pid, ppid, comm: &str, cmd: &str| ProcInfo {
        ppid: Some(ppid),
        ..proc(pid, comm, cmd)
    };
    let procs = [
        kid(301, 300, "cc1", "cc1 -O2 main.c"),
        kid(302, 300, "cc1", "cc1 -O2 util.c"),
    ];
    for seq in 1..=20 {
        let mut b = batch(seq, &[(301, [8 * MS; 5]), (302, [4 * MS; 5])], &procs);
        b.lineage = vec![
            kid(300, 200, "make", "make -j2"),
            kid(200, 1, "bash", "-bash"),
        ];
        a.update(Msg::Batch(Box::new(b)));
    }
    a.tree = true;
    a
}

#[test]
fn the_tree_draws_branches_and_a_folded_row_with_its_sums() {
    let ascii = Theme {
        ascii: true,
        ..Theme::default()
    };
    let mut a = build_tree();
    let t = text_with(&a, ascii, 100, 30);
    let line = |t: &str, s: &str| t.lines().find(|l| l.contains(s)).unwrap_or("").to_string();
    assert!(line(&t, "-bash").contains("   0.0"), "{t}");
    assert!(line(&t, "`- make -j2").contains(" 300 "), "{t}");
    assert!(line(&t, "|- cc1 -O2 main.c").contains(" 80.0"), "{t}");
    assert!(line(&t, "`- cc1 -O2 util.c").contains(" 40.0"), "{t}");
    let mut unicode = text(&a, 100, 30);
    assert!(
        unicode.contains("└─ make -j2") && unicode.contains("├─ cc1"),
        "{unicode}"
    );
    // Folded: make's row says how many rows it holds and sums their CPU.
    let make = a.tree_rows()[1].entry.key;
    a.collapsed.insert(make);
    unicode = text(&a, 100, 30);
    let folded = line(&unicode, "[+2] make -j2");
    assert!(folded.contains("120.0"), "{unicode}");
    assert!(!unicode.contains("cc1 -O2"), "{unicode}");
}
