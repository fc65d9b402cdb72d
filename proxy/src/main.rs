//! worlds-proxy: a PostgreSQL wire proxy for pg_worlds (proxy/README.md). The database name a client
//! connects to chooses its world; the spec's statements run typed; everything else passes through.
mod cancel;
mod intercept;
mod session;
mod tls;
mod upstream;
mod wire;

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

pub struct Config {
    pub upstream: upstream::Upstream,
    pub max_message: usize,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub upstream_tls: Option<tokio_rustls::TlsConnector>,
    /// threads serving clients (--threads; by default as many as the machine has cores), see `Workers`
    pub threads: usize,
}

const USAGE: &str = "usage: worlds-proxy --listen HOST:PORT --upstream 'host=... port=... dbname=...' \
[--tls-cert FILE --tls-key FILE] [--max-message-bytes N] [--threads N]";

fn parse_args(args: &[String]) -> Result<(String, Config), String> {
    let (mut listen, mut up, mut cert, mut key, mut max, mut threads) = (None, None, None, None, 64usize << 20, 0usize);
    let mut i = 0;
    while i < args.len() {
        let value = || args.get(i + 1).cloned().ok_or_else(|| format!("{} needs a value\n{USAGE}", args[i]));
        match args[i].as_str() {
            "--listen" => listen = Some(value()?),
            "--upstream" => up = Some(value()?),
            "--tls-cert" => cert = Some(value()?),
            "--tls-key" => key = Some(value()?),
            "--max-message-bytes" => max = value()?.parse().map_err(|_| format!("--max-message-bytes takes a number\n{USAGE}"))?,
            "--threads" => threads = value()?.parse().ok().filter(|n| (1..=256).contains(n)).ok_or_else(|| format!("--threads takes a number from 1 to 256\n{USAGE}"))?,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
        i += 2;
    }
    let listen = listen.ok_or_else(|| format!("--listen is required\n{USAGE}"))?;
    let upstream = upstream::parse_conninfo(&up.ok_or_else(|| format!("--upstream is required\n{USAGE}"))?)?;
    let tls = match (cert, key) {
        (Some(c), Some(k)) => Some(tls::acceptor(&c, &k)?),
        (None, None) => None,
        _ => return Err("--tls-cert and --tls-key go together".into()),
    };
    if max < 1024 {
        return Err("--max-message-bytes must be at least 1024".into());
    }
    let upstream_tls = (upstream.sslmode != upstream::SslMode::Disable).then(tls::connector).transpose()?;
    if threads == 0 {
        threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(256));
    }
    Ok((listen, Config { upstream, max_message: max, tls, upstream_tls, threads }))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, config) = match parse_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("worlds-proxy: {e}");
            std::process::exit(2);
        }
    };
    // The accepting thread's runtime; the connections are served by `Workers`.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    match runtime {
        Ok(rt) => rt.block_on(serve(listen, config)),
        Err(e) => {
            eprintln!("worlds-proxy: cannot start: {e}");
            std::process::exit(1);
        }
    }
}

/// The threads serving connections: `--threads N` of them (by default one per core), each a one-thread
/// runtime of its own, a connection going to the one serving the fewest.
///
/// Why not one thread, as pgbouncer, nor a work-stealing pool: a client, its proxy thread and its backend
/// pass each message along a chain in which one of them runs at a time, and the kernel keeps such a chain
/// on one core (a waker's wakee runs where the waker was). One thread ties every chain to its core: each
/// message then crosses cores and wakes an idle one (bench P14: pgbouncer's one thread left a quarter of
/// two cores idle at 2 clients, 13k select-only tps against 20k with a thread per connection). A pool
/// that steals moves a connection between threads as it likes (P14: more CPU per transaction). And a
/// thread per connection loses when connections outnumber cores: one thread serving several answers all
/// the messages one wake-up finds (8 clients on 2 cores: 14.5k tps a thread each, 19.8k pgbouncer). A
/// thread per core, each connection staying on its thread, is both.
struct Workers {
    threads: Vec<(tokio::runtime::Handle, Arc<AtomicUsize>)>,
}

impl Workers {
    fn start(n: usize) -> std::io::Result<Workers> {
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let handle = runtime.handle().clone();
            // (the runtime runs its connections for as long as the process lives)
            std::thread::Builder::new().name(format!("worker-{i}")).spawn(move || runtime.block_on(std::future::pending::<()>()))?;
            threads.push((handle, Arc::new(AtomicUsize::new(0))));
        }
        Ok(Workers { threads })
    }

    /// Serves the connection on the thread with the fewest, until it ends.
    fn serve(&self, socket: tokio::net::TcpStream, config: Arc<Config>, id: u64, peer: std::net::SocketAddr) {
        let report = move |e: String| eprintln!("worlds-proxy: connection {id} from {peer}: {e}");
        let Some((handle, live)) = self.threads.iter().min_by_key(|(_, live)| live.load(Relaxed)) else { return };
        // the socket leaves this thread's reactor for the worker's
        let socket = match socket.into_std() {
            Ok(s) => s,
            Err(e) => return report(format!("cannot hand the connection to its thread: {e}")),
        };
        /// The thread's count of connections, less one when the connection ends however it ends.
        struct Serving(Arc<AtomicUsize>);
        impl Drop for Serving {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Relaxed);
            }
        }
        live.fetch_add(1, Relaxed);
        let serving = Serving(live.clone());
        handle.spawn(async move {
            let _serving = serving;
            let served = match tokio::net::TcpStream::from_std(socket) {
                Ok(socket) => session::serve(socket, &config).await,
                Err(e) => Err(format!("cannot register the connection: {e}")),
            };
            if let Err(e) = served {
                report(e);
            }
        });
    }
}

async fn serve(listen: String, config: Config) {
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("worlds-proxy: cannot listen on {listen}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!(
        "worlds-proxy: listening on {listen}, upstream {}:{} database {}",
        config.upstream.host, config.upstream.port, config.upstream.dbname
    );
    let workers = match Workers::start(config.threads) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("worlds-proxy: cannot start its threads: {e}");
            std::process::exit(1);
        }
    };
    let config = Arc::new(config);
    let accept = async {
        let mut next_id: u64 = 0;
        loop {
            match listener.accept().await {
                Ok((socket, peer)) => {
                    next_id += 1;
                    let config = config.clone();
                    let id = next_id;
                    workers.serve(socket, config, id, peer);
                }
                // (out of file descriptors and the like: wait a moment, never exit)
                Err(e) => {
                    eprintln!("worlds-proxy: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = accept => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("worlds-proxy: stopping");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(a: &[&str]) -> String {
        parse_args(&args(a)).err().expect("refused")
    }

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn command_line() {
        let (listen, c) = parse_args(&args(&["--listen", "127.0.0.1:6432", "--upstream", "host=/tmp port=5 dbname=app"])).unwrap();
        assert_eq!((listen.as_str(), c.upstream.dbname.as_str(), c.max_message), ("127.0.0.1:6432", "app", 64 << 20));
        assert!(err(&["--listen", "x"]).contains("--upstream is required"));
        assert!(err(&["--upstream", "dbname=a"]).contains("--listen is required"));
        assert!(err(&["--listen"]).contains("needs a value"));
        assert!(err(&["--listen", "x", "--upstream", "dbname=a", "--tls-cert", "c"]).contains("go together"));
        assert!(err(&["--bogus"]).contains("unknown argument"));
        assert_eq!(c.threads, std::thread::available_parallelism().unwrap().get());
        let (_, c) = parse_args(&args(&["--listen", "x", "--upstream", "dbname=a", "--threads", "4"])).unwrap();
        assert_eq!(c.threads, 4);
        assert!(err(&["--listen", "x", "--upstream", "dbname=a", "--threads", "0"]).contains("from 1 to 256"));
    }
}
