//! The etcd session behind a [`Fleet`]: connect (authenticated), revoke
//! the previous run's lease, grant a lease and keep it alive, put and
//! delete the drives' queue keys, read the group's queue and rank the
//! tickets. Any failed request ends the session at once (held slots are
//! given up); the next one starts after a backoff.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse,
};

use super::fleet::{rank, record_put, take_released, Fleet, QueueEntry};
use super::ticket::TicketShared;
use crate::config::coordination::Coordination;

mod error;
pub use error::SessionError;
use error::{describe, with_timeout, Agreement};

/// Starts the session task on `rt`; the fleet's state says how it goes.
/// The previous run's lease id is kept in `state_dir` and revoked first,
/// so a restarted daemon does not wait behind its own dead key.
pub fn start(cfg: Coordination, state_dir: &Path, rt: &tokio::runtime::Handle) -> Arc<Fleet> {
    let fleet = Fleet::new(cfg);
    let f = fleet.clone();
    let lease_file = state_dir.join("coordination.lease");
    rt.spawn(async move { run(f, lease_file).await });
    fleet
}

/// What `check-config` asks etcd: can it be reached, do the credentials
/// work, can the group's queue be read. `Ok` says what it found.
pub fn probe(cfg: &Coordination) -> Result<String, SessionError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(SessionError::Runtime)?;
    rt.block_on(async {
        let mut s = Session::open(cfg)
            .await
            .map_err(|why| SessionError::Unreachable {
                endpoints: cfg.etcd_endpoints.join(", "),
                source: Box::new(why),
            })?;
        let prefix = format!("{}/{}/queue/", cfg.prefix, cfg.group);
        let opts = GetOptions::new().with_prefix().with_count_only();
        let n = with_timeout(s.timeout, s.client.get(prefix.clone(), Some(opts)))
            .await
            .map_err(|why| SessionError::Read {
                prefix: prefix.clone(),
                source: Box::new(why),
            })?
            .count();
        let _ = with_timeout(s.timeout, s.client.lease_revoke(s.lease)).await;
        Ok(format!(
            "etcd reachable; group {} has {n} drive(s) holding or waiting for its {} slot(s)",
            cfg.group, cfg.max_concurrent
        ))
    })
}

/// How often the queue is read (and the session checked).
fn poll_every(cfg: &Coordination) -> Duration {
    (cfg.lease_ttl / 3).min(Duration::from_secs(1))
}

async fn run(fleet: Arc<Fleet>, lease_file: PathBuf) {
    let mut old_lease = std::fs::read_to_string(&lease_file)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok());
    let mut backoff = Duration::from_secs(1);
    loop {
        match Session::open(&fleet.cfg).await {
            Ok(mut s) => {
                if let Some(old) = old_lease.take() {
                    // Our previous lease (a restart, a lost session): its
                    // keys would hold a slot for nobody until it expires.
                    let _ = tokio::time::timeout(s.timeout, s.client.lease_revoke(old)).await;
                }
                if let Err(e) = std::fs::write(&lease_file, s.lease.to_string()) {
                    tracing::warn!("recording the etcd lease in {}: {e}", lease_file.display());
                }
                fleet.connected();
                backoff = Duration::from_secs(1);
                let why = s.serve(&fleet).await;
                if fleet.leaving.load(Ordering::Relaxed) {
                    let _ = tokio::time::timeout(s.timeout, s.client.lease_revoke(s.lease)).await;
                    let _ = std::fs::remove_file(&lease_file);
                    tracing::info!("left the fleet: lease revoked");
                    fleet.left.notify_one();
                    return;
                }
                fleet.events.sessions_lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("etcd session lost: {why}");
                fleet.disconnected(&format!("etcd session lost: {why}"));
                old_lease = Some(s.lease);
            }
            Err(_) if fleet.leaving.load(Ordering::Relaxed) => {
                fleet.left.notify_one();
                return;
            }
            Err(why) => {
                fleet.events.connect_errors.fetch_add(1, Ordering::Relaxed);
                let msg = format!(
                    "etcd unreachable ({}): {why}; not refreshing until it is",
                    fleet.cfg.etcd_endpoints.join(", ")
                );
                if fleet.connected_now() || fleet.lock().error.as_deref() != Some(&msg) {
                    tracing::error!("{msg}");
                }
                fleet.disconnected(&msg);
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = fleet.wake.notified() => {}
        }
        if fleet.leaving.load(Ordering::Relaxed) {
            fleet.left.notify_one();
            return;
        }
    }
}

/// TLS to etcd, with `ca_file` (and a client certificate if given).
fn tls_options(cfg: &Coordination) -> Result<Option<etcd_client::TlsOptions>, SessionError> {
    let Some(ca) = &cfg.ca_file else {
        return Ok(None);
    };
    let read = |p: &Path, what: &'static str| {
        std::fs::read(p).map_err(|source| SessionError::File {
            what,
            path: p.to_path_buf(),
            source,
        })
    };
    let mut tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read(ca, "ca_file")?));
    if let (Some(cert), Some(key)) = (&cfg.cert_file, &cfg.key_file) {
        tls = tls.identity(etcd_client::Identity::from_pem(
            read(cert, "cert_file")?,
            read(key, "key_file")?,
        ));
    }
    Ok(Some(tls))
}

/// One session: a client and a lease kept alive.
struct Session {
    client: Client,
    lease: i64,
    keeper: etcd_client::LeaseKeeper,
    stream: etcd_client::LeaseKeepAliveStream,
    timeout: Duration,
    ttl: Duration,
    /// Groups whose `max_concurrent` agrees with etcd's (this session).
    agreed: std::collections::BTreeSet<String>,
}

impl Session {
    async fn open(cfg: &Coordination) -> Result<Session, SessionError> {
        Session::connect(cfg).await.map_err(|why| {
            let no_cert = cfg.ca_file.is_some() && cfg.cert_file.is_none();
            if no_cert && !why.to_string().contains("certificate") {
                SessionError::ClientCertificate(Box::new(why))
            } else {
                why
            }
        })
    }

    /// A session with the first endpoint that works, starting one further
    /// each time: the client's balancer sends requests to a member that is
    /// down as well, so one dead member would fail every session.
    async fn connect(cfg: &Coordination) -> Result<Session, SessionError> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = cfg.etcd_endpoints.len().max(1);
        let first = NEXT.fetch_add(1, Ordering::Relaxed) % n;
        let mut errors = vec![];
        for i in 0..n {
            let Some(endpoint) = cfg.etcd_endpoints.get((first + i) % n) else {
                break;
            };
            match Session::connect_to(cfg, endpoint).await {
                Ok(s) => return Ok(s),
                Err(why) if n == 1 => return Err(why),
                Err(why) => errors.push((endpoint.clone(), why)),
            }
        }
        Err(SessionError::Endpoints(errors))
    }

    async fn connect_to(cfg: &Coordination, endpoint: &str) -> Result<Session, SessionError> {
        let timeout = (cfg.lease_ttl / 3).min(Duration::from_secs(2));
        // An expired auth token (etcd's simple tokens live 5 minutes by
        // default) is renewed by the client, not taken for a lost session.
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout)
            .with_auto_token_refresh(true);
        if let (Some(user), Some(file)) = (&cfg.user, &cfg.password_file) {
            let pw = std::fs::read_to_string(file).map_err(|source| SessionError::File {
                what: "password_file",
                path: file.clone(),
                source,
            })?;
            opts = opts.with_user(user.clone(), pw.trim_end_matches(['\n', '\r']).to_string());
        }
        if let Some(tls) = tls_options(cfg)? {
            opts = opts.with_tls(tls);
        }
        let connect = Client::connect([endpoint], Some(opts));
        let mut client = tokio::time::timeout(timeout * 2, connect)
            .await
            .map_err(|_| SessionError::ConnectTimeout)?
            .map_err(|e| SessionError::Etcd(describe(&e)))?;
        let ttl = cfg.lease_ttl.as_secs() as i64;
        let lease = with_timeout(timeout, client.lease_grant(ttl, None))
            .await?
            .id();
        let (keeper, stream) = with_timeout(timeout, client.lease_keep_alive(lease)).await?;
        Ok(Session {
            client,
            lease,
            keeper,
            stream,
            timeout,
            ttl: cfg.lease_ttl,
            agreed: Default::default(),
        })
    }

    /// Keeps the lease alive and the queue ranked until a request fails;
    /// returns why.
    async fn serve(&mut self, fleet: &Fleet) -> SessionError {
        let mut next_keepalive = Instant::now();
        let mut until = Instant::now();
        loop {
            if fleet.leaving.load(Ordering::Relaxed) {
                return SessionError::Leaving;
            }
            if Instant::now() >= next_keepalive {
                let sent = Instant::now();
                match self.keep_alive().await {
                    Ok(()) => {
                        // The lease lasts at least `ttl` from `sent`; a
                        // third of it is left for in-flight I/O to end.
                        until = sent + self.ttl * 2 / 3;
                        next_keepalive = sent + self.ttl / 3;
                    }
                    Err(why) => return why,
                }
            }
            if let Err(why) = self.sync(fleet, until).await {
                return why;
            }
            tokio::select! {
                _ = tokio::time::sleep(poll_every(&fleet.cfg)) => {}
                _ = fleet.wake.notified() => {}
            }
        }
    }

    async fn keep_alive(&mut self) -> Result<(), SessionError> {
        let round = async {
            self.keeper.keep_alive().await?;
            self.stream.message().await
        };
        match tokio::time::timeout(self.timeout, round).await {
            Err(_) => Err(SessionError::KeepAliveTimeout),
            Ok(Err(e)) => Err(SessionError::Etcd(describe(&e))),
            Ok(Ok(None)) => Err(SessionError::KeepAliveEnded),
            Ok(Ok(Some(r))) if r.ttl() <= 0 => Err(SessionError::LeaseExpired),
            Ok(Ok(Some(_))) => Ok(()),
        }
    }

    /// Deletes released keys; for each group: checks it agrees on
    /// `max_concurrent`, puts new keys, reads the queue and ranks.
    async fn sync(&mut self, fleet: &Fleet, until: Instant) -> Result<(), SessionError> {
        let released = std::mem::take(&mut fleet.lock().released);
        for key in released {
            with_timeout(self.timeout, self.client.delete(key, None)).await?;
        }
        for group in fleet.groups() {
            if !self.agreed.contains(&group) {
                match self.agree(fleet, &group).await? {
                    Agreement::Agrees => {
                        fleet.lock().refused.remove(&group);
                        self.agreed.insert(group.clone());
                    }
                    why => {
                        if !fleet.refused(&group) {
                            tracing::error!("{why}");
                        }
                        fleet.refuse(&group, &why.to_string());
                        continue;
                    }
                }
            }
            self.sync_group(fleet, &group, until).await?;
        }
        fleet.connected();
        Ok(())
    }

    /// Records the group's `max_concurrent` in etcd if nobody has, else
    /// compares: members that disagree would let more drives refresh at
    /// once than some of them allow.
    async fn agree(&mut self, fleet: &Fleet, group: &str) -> Result<Agreement, SessionError> {
        let key = format!("{}/{group}/max_concurrent", fleet.cfg.prefix);
        let ours = fleet.cfg.max_concurrent.to_string();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), ours.clone(), None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let r = with_timeout(self.timeout, self.client.txn(txn)).await?;
        if r.succeeded() {
            tracing::info!(group, max_concurrent = %ours, "recorded the group's max_concurrent in etcd");
            return Ok(Agreement::Agrees);
        }
        let theirs = r.op_responses().into_iter().find_map(|o| match o {
            TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
            _ => None,
        });
        match theirs {
            Some(t) if t == ours => Ok(Agreement::Agrees),
            theirs => Ok(Agreement::Disagrees {
                group: group.to_string(),
                key,
                theirs,
                ours,
            }),
        }
    }

    /// Puts the group's new keys, reads its queue, ranks its tickets.
    async fn sync_group(
        &mut self,
        fleet: &Fleet,
        group: &str,
        until: Instant,
    ) -> Result<(), SessionError> {
        let prefix = format!("{}/{group}/queue/", fleet.cfg.prefix);
        let unqueued: Vec<Arc<TicketShared>> = {
            let st = fleet.lock();
            st.tickets
                .values()
                .filter(|t| t.group == group && !st.keys.contains_key(&t.id))
                .cloned()
                .collect()
        };
        for t in unqueued {
            let key = format!("{prefix}{:016x}/{}", self.lease, t.device);
            let entry = QueueEntry {
                name: fleet.cfg.name.clone(),
                device: t.device.clone(),
                since: crate::inventory::now_secs(),
            };
            let value = serde_json::to_vec(&entry).unwrap_or_default();
            if take_released(fleet, &key) {
                let deleted =
                    with_timeout(self.timeout, self.client.delete(key.clone(), None)).await;
                if let Err(e) = deleted {
                    // Still to delete: the next session's lease revoke
                    // (or its expiry) takes it if nothing else does.
                    fleet.lock().released.push(key);
                    return Err(e);
                }
            }
            let opts = PutOptions::new().with_lease(self.lease);
            with_timeout(
                self.timeout,
                self.client.put(key.clone(), value, Some(opts)),
            )
            .await?;
            record_put(fleet, &t, key);
        }
        let opts = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let resp = with_timeout(self.timeout, self.client.get(prefix, Some(opts))).await?;
        let mut keys = vec![];
        let mut entries = vec![];
        for kv in resp.kvs() {
            keys.push(String::from_utf8_lossy(kv.key()).into_owned());
            entries.push(
                serde_json::from_slice::<QueueEntry>(kv.value()).unwrap_or(QueueEntry {
                    name: "?".into(),
                    device: String::from_utf8_lossy(kv.key()).into_owned(),
                    since: 0,
                }),
            );
        }
        rank(fleet, group, &keys, entries, until);
        Ok(())
    }
}
