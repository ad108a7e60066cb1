use super::*;

fn drive() -> DriveStatusReply {
    DriveStatusReply {
        device: "sda".into(),
        state: HealthState::Degraded,
        waiting: Some(crate::state::Waiting::Window),
        diagnosis: vec![],
        paused: false,
        files: 3,
        stale_files: 2,
        stale_bytes: 1 << 20,
        last_scan: Some(1),
        last_sample: None,
        refresh: Some(Progress::default()),
        yielding: None,
        yielded_seconds: 0.0,
        last_refresh: None,
        requests: 1,
        completed: 0,
        last_request: None,
        last_request_round: None,
        last_round: None,
        error: None,
        slot: None,
    }
}

#[test]
fn status_keeps_the_version_1_wire_format() {
    let v = serde_json::to_value(drive()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    for k in [
        "device",
        "state",
        "waiting",
        "diagnosis",
        "paused",
        "files",
        "stale_files",
        "stale_bytes",
        "last_scan",
        "last_sample",
        "refresh",
        "last_refresh",
        "requests",
        "completed",
        "last_request",
        "error",
    ] {
        assert!(keys.contains(&k), "{k} gone from the wire: {keys:?}");
    }
    assert_eq!(v["state"], "degraded", "states keep their labels");
    assert_eq!(v["refresh"]["eta_seconds"], serde_json::Value::Null);
}

#[test]
fn an_older_daemons_answer_still_reads() {
    // Without the fields added since (yielding, unwatched…).
    let mut v = serde_json::to_value(StatusReply {
        version: "0.1.0".into(),
        uptime_seconds: 5,
        drives: vec![drive()],
        unwatched: vec![],
        coordination: None,
    })
    .unwrap();
    v.as_object_mut().unwrap().remove("unwatched");
    let d = v["drives"][0].as_object_mut().unwrap();
    d.remove("yielding");
    d.remove("yielded_seconds");
    d.remove("diagnosis");
    let back: StatusReply = serde_json::from_value(v).unwrap();
    assert_eq!(back.drives[0].device, "sda");
    assert!(back.unwatched.is_empty());
}
