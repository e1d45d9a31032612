//! TLS, mutual TLS and logins, against a real `quarry playground --secure`
//! (certificates it made, the user root it created) and real processes
//! started on other addresses: what a client without the right
//! credentials gets, and that the right ones work.

mod common;

use std::process::Command;
use std::time::Duration;

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult, ActionEndTransactionRequest, Any,
    CommandStatementUpdate, ProstMessageExt,
};
use arrow_flight::{Action, FlightData, FlightDescriptor, HandshakeRequest, Ticket};
use common::*;
use prost::Message;
use quarry_client::{Client, ConnectOptions, Error};
use quarry_proto::meta::meta_client::MetaClient;
use quarry_proto::meta::{DropTableRequest, ListTablesRequest};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;

const ROOT_PASSWORD: &str = "pw-root";

fn options(ca: &str, user: Option<(&str, &str)>) -> ConnectOptions {
    ConnectOptions {
        ca_pem: Some(std::fs::read(ca).unwrap()),
        user: user.map(|(u, _)| u.to_string()),
        password: user.map(|(_, p)| p.to_string()),
    }
}

/// The runtime every client of a test lives in (a client's connection
/// is a task of the runtime that made it).
static RT: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

fn login(pg: &Playground, user: &str, password: &str) -> Result<Client, Error> {
    let ca = pg.ca.as_deref().unwrap();
    RT.block_on(Client::connect_with(
        &pg.compute,
        &options(ca, Some((user, password))),
    ))
}

fn sql(c: &mut Client, text: &str) -> Result<String, Error> {
    let batches = RT.block_on(c.sql(text))?;
    Ok(arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string())
}

/// A certificate for `cn` signed by the playground's CA (its key is in
/// the data dir), and its key, in PEM.
fn cert_signed_by_playground_ca(pg: &Playground, cn: &str) -> (String, String) {
    let certs = pg.dir.path().join("data/certs");
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(certs.join("ca.key")).unwrap()).unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "Quarry playground CA");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, &issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Calls `ListTables` on a store's meta service over `tls` (plaintext
/// without); the error's text, or "ok".
fn list_tables(store: &str, tls: Option<ClientTlsConfig>) -> String {
    RT.block_on(async {
        let ep = match tls {
            Some(tls) => Endpoint::from_shared(format!("https://{store}"))
                .unwrap()
                .tls_config(tls)
                .unwrap(),
            None => Endpoint::from_shared(format!("http://{store}")).unwrap(),
        };
        let ep = ep.timeout(Duration::from_secs(5));
        let ch = match ep.connect().await {
            Ok(ch) => ch,
            Err(e) => return format!("connect: {e:?}"),
        };
        match MetaClient::new(ch).list_tables(ListTablesRequest {}).await {
            Ok(_) => "ok".to_string(),
            Err(st) => format!("{:?}: {} {st:?}", st.code(), st.message()),
        }
    })
}

/// A TLS channel to `url`, trusting the CA certificate at `ca`, with
/// `identity` as the client certificate if given.
async fn tls_channel(url: &str, ca: &str, identity: Option<Identity>) -> Channel {
    let ca = Certificate::from_pem(std::fs::read(ca).unwrap());
    let mut tls = ClientTlsConfig::new().ca_certificate(ca);
    if let Some(id) = identity {
        tls = tls.identity(id);
    }
    Endpoint::from_shared(url.to_string())
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A raw Flight client of a secure compute, over TLS.
async fn raw_flight(pg: &Playground) -> FlightServiceClient<Channel> {
    FlightServiceClient::new(tls_channel(&pg.compute, pg.ca.as_deref().unwrap(), None).await)
}

/// `authorization: Bearer …` for `user`, from a handshake.
async fn bearer(c: &mut FlightServiceClient<Channel>, user: &str, password: &str) -> String {
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut req = tonic::Request::new(futures::stream::iter([HandshakeRequest::default()]));
    req.metadata_mut()
        .insert("authorization", format!("Basic {basic}").parse().unwrap());
    let resp = c.handshake(req).await.unwrap();
    let token = resp.metadata().get("authorization").unwrap();
    token.to_str().unwrap().to_string()
}

fn with_token<T>(msg: T, token: Option<&str>) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    if let Some(t) = token {
        req.metadata_mut()
            .insert("authorization", t.parse().unwrap());
    }
    req
}

fn action(kind: &str, body: impl ProstMessageExt) -> Action {
    Action {
        r#type: kind.into(),
        body: body.as_any().encode_to_vec().into(),
    }
}

/// Every Flight call but the handshake needs a token (a forged ticket,
/// an update, an action included), and a transaction is its user's.
fn flight_calls_need_a_token_and_transactions_their_owner(pg: &Playground) {
    RT.block_on(async {
        let mut c = raw_flight(pg).await;
        let ticket = c.do_get(Ticket::new(b"SELECT 1".to_vec())).await;
        assert_eq!(ticket.err().unwrap().code(), Code::Unauthenticated);
        let begin = c
            .do_action(action("BeginTransaction", ActionBeginTransactionRequest {}))
            .await;
        assert_eq!(begin.err().unwrap().code(), Code::Unauthenticated);
        let update = CommandStatementUpdate {
            query: "DROP TABLE lineitem".into(),
            transaction_id: None,
        };
        let put = FlightData {
            flight_descriptor: Some(FlightDescriptor::new_cmd(update.as_any().encode_to_vec())),
            ..Default::default()
        };
        let put = c.do_put(futures::stream::iter([put])).await;
        assert_eq!(put.err().unwrap().code(), Code::Unauthenticated);
        let forged = with_token(
            action("BeginTransaction", ActionBeginTransactionRequest {}),
            Some("Bearer 0123"),
        );
        let err = c.do_action(forged).await.err().unwrap();
        assert_eq!(err.code(), Code::Unauthenticated);
        assert!(err.message().contains("unknown or expired"), "{err:?}");

        // root's transaction: bob cannot end it, root can.
        let root = bearer(&mut c, "root", ROOT_PASSWORD).await;
        let bob = bearer(&mut c, "bob", "bob-1").await;
        let begun = c
            .do_action(with_token(
                action("BeginTransaction", ActionBeginTransactionRequest {}),
                Some(&root),
            ))
            .await
            .unwrap()
            .into_inner()
            .message()
            .await
            .unwrap()
            .unwrap();
        let begun: ActionBeginTransactionResult = Any::decode(&*begun.body)
            .unwrap()
            .unpack()
            .unwrap()
            .unwrap();
        let end = || {
            action(
                "EndTransaction",
                ActionEndTransactionRequest {
                    transaction_id: begun.transaction_id.clone(),
                    action: 2, // rollback
                },
            )
        };
        let err = c
            .do_action(with_token(end(), Some(&bob)))
            .await
            .err()
            .unwrap();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("no open transaction"), "{err:?}");
        let mut done = c
            .do_action(with_token(end(), Some(&root)))
            .await
            .unwrap()
            .into_inner();
        while done.message().await.unwrap().is_some() {}
    });
}

#[test]
fn a_secure_playground_needs_tls_certificates_and_logins() {
    let _serial = SERIAL.lock();
    let pg = Playground::start_secure(ROOT_PASSWORD);
    let ca = pg.ca.clone().expect("a 'ca PATH' line before ready");
    assert!(pg.compute.starts_with("https://"), "{}", pg.compute);

    // --- compute: TLS, then a login.
    let plain = pg.compute.replace("https://", "http://");
    let err = RT
        .block_on(async { Client::connect(&plain).await?.sql("SELECT 1").await })
        .unwrap_err();
    assert!(
        !matches!(err, Error::InvalidInput(_)),
        "plaintext to a TLS port must fail to connect: {err}"
    );
    let err = RT
        .block_on(Client::connect_with(
            &pg.compute,
            &ConnectOptions::default(),
        ))
        .err()
        .unwrap();
    assert!(err.to_string().contains("give the CA certificate"), "{err}");
    // Another CA's certificate does not verify compute's.
    let other = tempfile::tempdir().unwrap();
    let other_ca = quarry::secure::generate_certs(other.path()).unwrap().ca;
    let err = RT
        .block_on(async {
            let opts = options(other_ca.to_str().unwrap(), Some(("root", ROOT_PASSWORD)));
            Client::connect_with(&pg.compute, &opts).await
        })
        .err()
        .unwrap();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    // TLS without a login: UNAUTHENTICATED on the first call.
    let mut anonymous = RT
        .block_on(Client::connect_with(&pg.compute, &options(&ca, None)))
        .unwrap();
    let err = sql(&mut anonymous, "DROP TABLE lineitem").unwrap_err();
    assert!(matches!(err, Error::Unauthenticated(_)), "{err}");
    assert!(err.to_string().contains("requires a login"), "{err}");
    // A wrong password and an unknown user get the same answer.
    for (user, password) in [("root", "wrong"), ("nobody", ROOT_PASSWORD)] {
        let err = login(&pg, user, password).err().unwrap();
        assert!(matches!(err, Error::Unauthenticated(_)), "{err}");
        assert_eq!(
            err.to_string(),
            "login failed: unknown user or wrong password"
        );
    }

    // --- users.
    let mut root = login(&pg, "root", ROOT_PASSWORD).unwrap();
    assert!(sql(&mut root, "SELECT count(*) AS n FROM lineitem")
        .unwrap()
        .contains("| 60175 |"));
    sql(&mut root, "CREATE USER alice WITH PASSWORD 'alice-1'").unwrap();
    let err = sql(&mut root, "CREATE USER alice WITH PASSWORD 'x'").unwrap_err();
    assert!(
        err.to_string().contains("user alice already exists"),
        "{err}"
    );
    sql(
        &mut root,
        "CREATE USER IF NOT EXISTS alice WITH PASSWORD 'x'",
    )
    .unwrap();
    let users = sql(&mut root, "SHOW USERS").unwrap();
    assert!(users.contains("| alice | false     |"), "{users}");
    assert!(users.contains("| root  | true      |"), "{users}");

    let mut alice = login(&pg, "alice", "alice-1").unwrap();
    assert!(sql(&mut alice, "SELECT count(*) AS n FROM lineitem")
        .unwrap()
        .contains("| 60175 |"));
    let err = sql(&mut alice, "CREATE USER mallory WITH PASSWORD 'm'").unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err}");
    assert!(
        err.to_string()
            .contains("only a superuser may create users (logged in as alice)"),
        "{err}"
    );
    let err = sql(&mut alice, "ALTER USER root WITH PASSWORD 'mine'").unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err}");
    // Her own password she may change; the old one stops working.
    let mut alice_elsewhere = login(&pg, "alice", "alice-1").unwrap();
    sql(&mut alice, "ALTER USER alice WITH PASSWORD 'alice-2'").unwrap();
    let err = login(&pg, "alice", "alice-1").err().unwrap();
    assert!(matches!(err, Error::Unauthenticated(_)), "{err}");
    // Her other session, logged in with the old password, ends; the one
    // that changed it goes on.
    let err = sql(&mut alice_elsewhere, "SELECT 1").unwrap_err();
    assert!(matches!(err, Error::Unauthenticated(_)), "{err}");
    sql(&mut alice, "SELECT 1").unwrap();
    let mut alice2 = login(&pg, "alice", "alice-2").unwrap();

    // DROP USER ends her sessions on this compute at once.
    let err = sql(&mut root, "DROP USER root").unwrap_err();
    assert!(err.to_string().contains("cannot drop itself"), "{err}");
    sql(&mut root, "DROP USER alice").unwrap();
    for c in [&mut alice, &mut alice2] {
        let err = sql(c, "SELECT 1").unwrap_err();
        assert!(matches!(err, Error::Unauthenticated(_)), "{err}");
    }
    let err = login(&pg, "alice", "alice-2").err().unwrap();
    assert!(matches!(err, Error::Unauthenticated(_)), "{err}");

    sql(&mut root, "CREATE USER bob WITH PASSWORD 'bob-1'").unwrap();
    flight_calls_need_a_token_and_transactions_their_owner(&pg);

    // The shell logs in with --ca, --user and QUARRY_PASSWORD.
    assert_eq!(pg.ok("SELECT 40 + 2 AS x"), "x\n42\n");
    let out = Command::new(QUARRY)
        .args(["sql", "--addr", &pg.compute, "--ca", &ca, "--user", "root"])
        .env("QUARRY_PASSWORD", "wrong")
        .arg("SELECT 1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("login failed"), "{stderr}");

    // --- stores: only the cluster's certificates, with the allowed name.
    let store = pg.stores[0].1.clone();
    let out = list_tables(&store, None);
    assert_ne!(out, "ok", "plaintext reached a store");
    // Dropping a table through meta without a certificate: refused, and
    // the table is still there.
    let dropped = RT.block_on(async {
        let ch = Endpoint::from_shared(format!("http://{store}"))
            .unwrap()
            .timeout(Duration::from_secs(5))
            .connect()
            .await;
        match ch {
            Ok(ch) => MetaClient::new(ch)
                .drop_table(DropTableRequest {
                    name: "lineitem".into(),
                    if_exists: false,
                })
                .await
                .is_ok(),
            Err(_) => false,
        }
    });
    assert!(!dropped);
    let ca_pem = std::fs::read(&ca).unwrap();
    let server_only = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca_pem));
    let out = list_tables(&store, Some(server_only.clone()));
    assert_ne!(out, "ok", "a store answered a client without a certificate");
    // Signed by our CA but named otherwise: PERMISSION_DENIED by name.
    let (cert, key) = cert_signed_by_playground_ca(&pg, "intruder");
    let out = list_tables(
        &store,
        Some(server_only.clone().identity(Identity::from_pem(cert, key))),
    );
    assert!(
        out.contains("PermissionDenied")
            && out.contains("certificate CN 'intruder' is not in this server's cert-allowed-cn"),
        "{out}"
    );
    // A cluster certificate (the playground's own) is let in.
    let certs = pg.dir.path().join("data/certs");
    let node = Identity::from_pem(
        std::fs::read(certs.join("node.pem")).unwrap(),
        std::fs::read(certs.join("node.key")).unwrap(),
    );
    assert_eq!(list_tables(&store, Some(server_only.identity(node))), "ok");
    assert_eq!(pg.ok("SELECT count(*) AS n FROM lineitem"), "n\n60175\n");

    // quarry status takes the cluster certificate from its flags.
    let status = |with_cert: bool| {
        let mut cmd = Command::new(QUARRY);
        cmd.args(["status", "--store", &store]);
        if with_cert {
            cmd.arg("--ca").arg(&ca);
            cmd.arg("--cert").arg(certs.join("node.pem"));
            cmd.arg("--key").arg(certs.join("node.key"));
        }
        String::from_utf8(cmd.output().unwrap().stdout).unwrap()
    };
    assert!(status(true).contains("regions"), "{}", status(true));
    assert!(status(false).contains("unreachable"), "{}", status(false));
}

/// Calls the MPP worker service's `GetWorkerInfo` on a secure compute
/// process, trusting `ca`, with `identity` as the client certificate if
/// given: "ok", or the status code and message.
fn worker_info(compute: &str, ca: &str, identity: Option<Identity>) -> String {
    RT.block_on(async {
        let mut grpc = tonic::client::Grpc::new(tls_channel(compute, ca, identity).await);
        grpc.ready().await.unwrap();
        let path = http::uri::PathAndQuery::from_static("/worker.WorkerService/GetWorkerInfo");
        let codec = tonic_prost::ProstCodec::<(), ()>::default();
        match grpc.unary(tonic::Request::new(()), path, codec).await {
            Ok(_) => "ok".to_string(),
            Err(st) => format!("{:?}: {}", st.code(), st.message()),
        }
    })
}

/// MPP in a secure cluster: three compute processes spread a query over
/// mutual TLS with their cluster certificate, and a worker admits only
/// callers that present one (a client with a password has none).
#[test]
fn a_secure_cluster_spreads_queries_over_its_compute_processes() {
    let _serial = SERIAL.lock();
    let pg = Playground::start_lineitem(&[
        "--secure",
        "--password",
        ROOT_PASSWORD,
        "--computes",
        "3",
        "--mpp",
        "force",
    ]);
    let ca = pg.ca.clone().expect("a 'ca PATH' line before ready");
    let mut c = login(&pg, "root", ROOT_PASSWORD).unwrap();
    let q = "SELECT l_returnflag, l_linestatus, count(*), sum(l_quantity), sum(l_extendedprice) \
             FROM lineitem GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus";
    // The three find each other through meta's list within a heartbeat
    // or two; then the scan runs as a task on each.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let plan = sql(&mut c, &format!("EXPLAIN {q}")).unwrap();
        if plan.contains("tasks=3") {
            assert!(plan.contains("DistributedExec"), "{plan}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no plan of 3 tasks within 30 s:\n{plan}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let spread = sql(&mut c, q).unwrap();
    let analyzed = sql(&mut c, &format!("EXPLAIN ANALYZE {q}")).unwrap();
    let workers = analyzed
        .split_once("Workers (each task's compute process):")
        .unwrap_or_else(|| panic!("no workers section:\n{analyzed}"))
        .1;
    let processes: std::collections::BTreeSet<&str> = workers
        .split("→ ")
        .skip(1)
        .filter_map(|rest| rest.split([' ', ',', '|', '\n']).next())
        .collect();
    assert_eq!(processes.len(), 3, "tasks ran on {processes:?}:\n{workers}");
    let groups = spread
        .lines()
        .filter(|l| l.starts_with("| ") && !l.contains("l_returnflag"))
        .count();
    assert_eq!(groups, 4, "{spread}");
    let count = sql(&mut c, "SELECT count(*) FROM lineitem").unwrap();
    assert!(count.contains("| 60175 "), "{count}");
    sql(&mut c, "SET mpp = 'off'").unwrap();
    assert_eq!(spread, sql(&mut c, q).unwrap());

    // The worker service, called directly: without a certificate it is
    // refused by name; with one the CA signed but of a name not in
    // cert-allowed-cn, refused naming it; with the cluster's own, served.
    let url = pg.compute.clone();
    let got = worker_info(&url, &ca, None);
    assert!(
        got.starts_with("Unauthenticated: MPP worker calls need a client certificate"),
        "{got}"
    );
    let (cert, key) = cert_signed_by_playground_ca(&pg, "intruder");
    let got = worker_info(&url, &ca, Some(Identity::from_pem(cert, key)));
    assert!(
        got.starts_with("PermissionDenied: certificate CN 'intruder' is not in"),
        "{got}"
    );
    let certs = pg.dir.path().join("data/certs");
    let node = Identity::from_pem(
        std::fs::read(certs.join("node.pem")).unwrap(),
        std::fs::read(certs.join("node.key")).unwrap(),
    );
    assert_eq!(worker_info(&url, &ca, Some(node)), "ok");
}

/// Plaintext on an address other than loopback is refused, by name,
/// unless --insecure says it is meant.
#[test]
fn plaintext_is_refused_off_loopback_without_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let data = data.to_str().unwrap();
    let storage = |extra: &[&str]| {
        Command::new(QUARRY)
            .args(["storage", "--store-id", "1", "--addr", "0.0.0.0:0"])
            .args(["--status-addr", "", "--data-dir", data])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let out = storage(&[]).wait_with_output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to serve plaintext on 0.0.0.0:") && stderr.contains("--insecure"),
        "{stderr}"
    );
    let out = Command::new(QUARRY)
        .args(["compute", "--addr", "0.0.0.0:0", "--status-addr", ""])
        .args(["--stores", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to serve plaintext on 0.0.0.0:"),
        "{stderr}"
    );

    // With --insecure it serves.
    let mut child = storage(&["--insecure"]);
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    signal(child.id(), "KILL");
    let _ = child.wait();
    assert!(line.contains("listening on 0.0.0.0:"), "{line}");
}
