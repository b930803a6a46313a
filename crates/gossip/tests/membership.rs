//! Gossip members on loopback UDP: joining, tags, graceful leave, failure
//! detection, immediate rejoin after a crash, force-leave, and encryption.

use std::net::SocketAddr;
use std::time::Duration;

use legate_gossip::{Gossip, GossipConfig, Key, Keyring, Member, Pool, Status, Tags, Timing};

async fn member(name: &str, keys: &[&Key], bind: &str) -> Gossip {
    member_in(Pool::Lan, name, keys, bind).await
}

async fn member_in(pool: Pool, name: &str, keys: &[&Key], bind: &str) -> Gossip {
    Gossip::start(config_for(pool, name, keys, bind))
        .await
        .unwrap()
}

fn config_for(pool: Pool, name: &str, keys: &[&Key], bind: &str) -> GossipConfig {
    GossipConfig {
        bind: bind.parse().unwrap(),
        advertise: None,
        name: name.into(),
        tags: Tags {
            role: "client".into(),
            dc: "dc1".into(),
            build: "0.1.0".into(),
            ..Default::default()
        },
        bump_file: None,
        keyring_file: None,
        keyring: Keyring::new(keys.iter().map(|k| (*k).clone()).collect()),
        timing: Timing::fast(),
        pool,
        allowed_sources: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_from_outside_the_allowed_ranges_are_dropped() {
    // serf_lan_allowed_cidrs: a member on 127.0.0.2 is never heard by one
    // that takes 127.0.0.1 only; a member on 127.0.0.1 joins.
    let mut config = config_for(Pool::Lan, "guarded", &[], "127.0.0.1:0");
    config.allowed_sources = vec![legate_types::cidr::Cidr::parse("127.0.0.1/32").unwrap()];
    let guarded = Gossip::start(config).await.unwrap();
    let outsider = member("outsider", &[], "127.0.0.2:0").await;
    assert_eq!(
        outsider
            .join(&[guarded.local_addr()], Duration::from_millis(1500))
            .await,
        0
    );
    let insider = member("insider", &[], "127.0.0.1:0").await;
    assert_eq!(
        insider
            .join(&[guarded.local_addr()], Duration::from_secs(5))
            .await,
        1
    );
    eventually(&guarded, "insider joined", |m| {
        status_of(m, "insider") == Some(Status::Alive)
    })
    .await;
    assert_eq!(status_of(&guarded.members(), "outsider"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encryption_rolls_out_with_verification_turned_off() {
    // Consul's rollout: members get the key with both verifications off
    // (they still talk to plain-text members), then outgoing, then
    // incoming are turned on.
    let key = Key::parse(&Key::generate()).unwrap();
    let plain = member("plain", &[], "127.0.0.1:0").await;
    let mut config = config_for(Pool::Lan, "rolling", &[&key], "127.0.0.1:0");
    config.keyring = config.keyring.with_verification(false, false);
    let rolling = Gossip::start(config).await.unwrap();
    assert_eq!(
        rolling
            .join(&[plain.local_addr()], Duration::from_secs(5))
            .await,
        1
    );
    eventually(&plain, "the keyed member joined", |m| {
        status_of(m, "rolling") == Some(Status::Alive)
    })
    .await;
    // With verification on, a plain member is not taken in.
    let strict = member("strict", &[&key], "127.0.0.1:0").await;
    let latecomer = member("latecomer", &[], "127.0.0.1:0").await;
    assert_eq!(
        latecomer
            .join(&[strict.local_addr()], Duration::from_millis(1500))
            .await,
        0
    );
}

/// Waits until `g` sees a member matching `f`.
async fn eventually(g: &Gossip, what: &str, f: impl Fn(&[Member]) -> bool) {
    let mut watch = g.watch();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if f(&watch.borrow_and_update()) {
                return;
            }
            watch.changed().await.unwrap();
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "timed out waiting until {what}: {:?}",
        g.members()
    );
}

fn status_of(members: &[Member], name: &str) -> Option<Status> {
    members.iter().find(|m| m.name == name).map(|m| m.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_departed_members_are_reaped_after_their_timeouts() {
    // Short timeouts here (the agent refuses less than 8h, as Consul).
    let mut config = config_for(Pool::Lan, "keeper", &[], "127.0.0.1:0");
    config.timing.reconnect_timeout = Duration::from_secs(2);
    config.timing.tombstone_timeout = Duration::from_secs(1);
    let keeper = Gossip::start(config).await.unwrap();
    let seed = keeper.local_addr();
    let crasher = member("crasher", &[], "127.0.0.1:0").await;
    let leaver = member("leaver", &[], "127.0.0.1:0").await;
    // This one asks to be kept for an hour whatever the keeper's setting.
    let mut patient_config = config_for(Pool::Lan, "patient", &[], "127.0.0.1:0");
    patient_config.tags.features = vec!["rc_tm=1h".into()];
    let patient = Gossip::start(patient_config).await.unwrap();
    for m in [&crasher, &leaver, &patient] {
        assert_eq!(m.join(&[seed], Duration::from_secs(5)).await, 1);
    }
    eventually(&keeper, "all joined", |m| {
        ["crasher", "leaver", "patient"]
            .iter()
            .all(|n| status_of(m, n) == Some(Status::Alive))
    })
    .await;
    leaver.leave().await;
    crasher.stop();
    patient.stop();
    // Each state is looked for on its own: with a 1 s tombstone the leaver
    // may be reaped before the crashers are found failed, so no single
    // view need show all three at once.
    let seen = std::sync::Mutex::new([false; 3]);
    eventually(&keeper, "the crashers failed, the leaver left", |m| {
        let mut seen = seen.lock().unwrap();
        seen[0] |= status_of(m, "crasher") == Some(Status::Failed);
        seen[1] |= status_of(m, "patient") == Some(Status::Failed);
        seen[2] |= status_of(m, "leaver") == Some(Status::Left);
        seen.iter().all(|s| *s)
    })
    .await;
    eventually(&keeper, "the leaver and the crasher were reaped", |m| {
        status_of(m, "crasher").is_none() && status_of(m, "leaver").is_none()
    })
    .await;
    assert_eq!(
        status_of(&keeper.members(), "patient"),
        Some(Status::Failed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_share_tags_leave_fail_and_rejoin() {
    let a = member("a", &[], "127.0.0.1:0").await;
    let b = member("b", &[], "127.0.0.1:0").await;
    let c = member("c", &[], "127.0.0.1:0").await;
    let seed: SocketAddr = a.local_addr();
    assert_eq!(b.join(&[seed], Duration::from_secs(5)).await, 1);
    assert_eq!(c.join(&[seed], Duration::from_secs(5)).await, 1);
    for g in [&a, &b, &c] {
        eventually(g, "all three are alive", |m| {
            ["a", "b", "c"]
                .iter()
                .all(|n| status_of(m, n) == Some(Status::Alive))
        })
        .await;
    }
    // Tags travel with the membership, and changes reach everyone.
    let mut tags = c
        .members()
        .into_iter()
        .find(|m| m.name == "c")
        .unwrap()
        .tags;
    tags.features = vec!["si".into(), "fs".into()];
    c.set_tags(tags).await;
    eventually(&a, "c's new tags arrived", |m| {
        m.iter()
            .any(|x| x.name == "c" && x.tags.features == ["si", "fs"])
    })
    .await;

    // A graceful leave is recorded as left, not failed.
    c.leave().await;
    eventually(&a, "c left", |m| status_of(m, "c") == Some(Status::Left)).await;
    eventually(&b, "c left", |m| status_of(m, "c") == Some(Status::Left)).await;

    // A crash is noticed as a failure.
    let b_addr = b.local_addr();
    b.stop();
    eventually(&a, "b failed", |m| {
        status_of(m, "b") == Some(Status::Failed)
    })
    .await;

    // The crashed node restarts on the same address and is alive at once.
    let b2 = member("b", &[], &b_addr.to_string()).await;
    assert_eq!(b2.join(&[seed], Duration::from_secs(5)).await, 1);
    eventually(&a, "b is back", |m| {
        status_of(m, "b") == Some(Status::Alive)
    })
    .await;

    // force-leave: unknown names are refused; a member that is alive
    // stays alive, and is recorded as left rather than failed when it
    // fails soon after (serf's leave intent).
    assert!(!a.force_leave("nobody").await);
    assert!(a.force_leave("b").await);
    assert_eq!(status_of(&a.members(), "b"), Some(Status::Alive));
    b2.stop();
    eventually(&a, "b left", |m| status_of(m, "b") == Some(Status::Left)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_gossip_needs_a_shared_key() {
    let k1 = Key::parse(&Key::generate()).unwrap();
    let k2 = Key::parse(&Key::generate()).unwrap();
    let a = member("a", &[&k1], "127.0.0.1:0").await;
    let stranger = member("stranger", &[&k2], "127.0.0.1:0").await;
    let plain = member("plain", &[], "127.0.0.1:0").await;
    assert_eq!(
        stranger
            .join(&[a.local_addr()], Duration::from_millis(1500))
            .await,
        0
    );
    assert_eq!(
        plain
            .join(&[a.local_addr()], Duration::from_millis(1500))
            .await,
        0
    );
    // A member whose keyring holds both keys (rotation) talks to a.
    let both = member("both", &[&k2, &k1], "127.0.0.1:0").await;
    // It seals with k2, which a cannot open: a must install k2 first.
    a.keyring().lock().unwrap().install(k2.clone());
    assert_eq!(
        both.join(&[a.local_addr()], Duration::from_secs(5)).await,
        1
    );
    eventually(&a, "both joined", |m| {
        status_of(m, "both") == Some(Status::Alive)
    })
    .await;
    assert_eq!(status_of(&a.members(), "stranger"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_two_sides_of_a_healed_partition_find_each_other_again() {
    let key = Key::parse(&Key::generate()).unwrap();
    let other = Key::parse(&Key::generate()).unwrap();
    let a = member("a", &[&key], "127.0.0.1:0").await;
    let b = member("b", &[&key], "127.0.0.1:0").await;
    let c = member("c", &[&key], "127.0.0.1:0").await;
    assert_eq!(b.join(&[a.local_addr()], Duration::from_secs(5)).await, 1);
    assert_eq!(c.join(&[a.local_addr()], Duration::from_secs(5)).await, 1);
    eventually(&a, "everyone is alive", |m| {
        ["b", "c"]
            .iter()
            .all(|n| status_of(m, n) == Some(Status::Alive))
    })
    .await;
    // Cut c off: nothing it sends opens elsewhere, and nothing reaches it.
    *c.keyring().lock().unwrap() = Keyring::new(vec![other]);
    eventually(&a, "c failed", |m| {
        status_of(m, "c") == Some(Status::Failed)
    })
    .await;
    eventually(&c, "a and b failed", |m| {
        ["a", "b"]
            .iter()
            .all(|n| status_of(m, n) == Some(Status::Failed))
    })
    .await;
    // Heal: without anyone joining again, both sides reconnect.
    *c.keyring().lock().unwrap() = Keyring::new(vec![key]);
    eventually(&a, "c is alive again", |m| {
        status_of(m, "c") == Some(Status::Alive)
    })
    .await;
    eventually(&c, "a and b are alive again", |m| {
        ["a", "b"]
            .iter()
            .all(|n| status_of(m, n) == Some(Status::Alive))
    })
    .await;
}

/// Waits until `g`'s keyring holds exactly `keys`, primary first.
async fn keyring_becomes(g: &Gossip, keys: &[&Key]) {
    let wanted: Vec<String> = keys.iter().map(|k| k.encoded().to_string()).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now: Vec<String> = g
            .keyring()
            .lock()
            .unwrap()
            .keys()
            .iter()
            .map(|k| k.encoded().to_string())
            .collect();
        if now == wanted {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "keyring is {now:?}, wanted {wanted:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyring_changes_and_force_leave_reach_every_member() {
    let k1 = Key::parse(&Key::generate()).unwrap();
    let k2 = Key::parse(&Key::generate()).unwrap();
    let a = member("a", &[&k1], "127.0.0.1:0").await;
    let b = member("b", &[&k1], "127.0.0.1:0").await;
    let c = member("c", &[&k1], "127.0.0.1:0").await;
    assert_eq!(b.join(&[a.local_addr()], Duration::from_secs(5)).await, 1);
    assert_eq!(c.join(&[a.local_addr()], Duration::from_secs(5)).await, 1);
    eventually(&b, "everyone is alive", |m| {
        ["a", "c"]
            .iter()
            .all(|n| status_of(m, n) == Some(Status::Alive))
    })
    .await;

    // Rotation: install everywhere, use everywhere, remove the old key.
    a.install_key(k2.encoded()).await.unwrap();
    for g in [&a, &b, &c] {
        keyring_becomes(g, &[&k1, &k2]).await;
    }
    // Members advertise what they hold (keyring -list counts by this).
    eventually(&a, "every member holds k2", |m| {
        m.iter()
            .filter(|m| m.tags.keys.contains(&k2.fingerprint()))
            .count()
            == 3
    })
    .await;
    b.use_key(k2.encoded()).await.unwrap();
    for g in [&a, &b, &c] {
        keyring_becomes(g, &[&k2, &k1]).await;
    }
    b.remove_key(k1.encoded()).await.unwrap();
    for g in [&a, &b, &c] {
        keyring_becomes(g, &[&k2]).await;
    }
    // Only k2 opens the cluster now.
    let late = member("late", &[&k2], "127.0.0.1:0").await;
    assert_eq!(
        late.join(&[b.local_addr()], Duration::from_secs(5)).await,
        1
    );
    let stale = member("stale", &[&k1], "127.0.0.1:0").await;
    assert_eq!(
        stale
            .join(&[b.local_addr()], Duration::from_millis(1500))
            .await,
        0
    );
    // Refusals name the reason and change nothing.
    assert!(a
        .remove_key(k2.encoded())
        .await
        .unwrap_err()
        .contains("primary"));
    assert!(a
        .use_key(k1.encoded())
        .await
        .unwrap_err()
        .contains("not installed"));
    assert!(a.install_key("garbage").await.is_err());
    let plain = member("plain", &[], "127.0.0.1:0").await;
    assert!(plain
        .install_key(k2.encoded())
        .await
        .unwrap_err()
        .contains("not enabled"));

    // force-leave on one member shows as left on the others.
    c.stop();
    eventually(&b, "c failed", |m| {
        status_of(m, "c") == Some(Status::Failed)
    })
    .await;
    eventually(&a, "c failed", |m| {
        status_of(m, "c") == Some(Status::Failed)
    })
    .await;
    assert!(a.force_leave("c").await);
    eventually(&b, "c left everywhere", |m| {
        status_of(m, "c") == Some(Status::Left)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_learns_the_whole_membership_at_once() {
    // Forty members whose identities are too large for one announce reply
    // to carry them all; gossip alone spreads joins to only some of them
    // (each update is sent a bounded number of times), the periodic
    // push-pull fills in the rest.
    let start = |name: String| async move {
        Gossip::start(GossipConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            name,
            tags: Tags {
                role: "client".into(),
                dc: "dc1".into(),
                build: "0.1.0".into(),
                node_id: "00000000-0000-0000-0000-000000000000".into(),
                features: (0..8).map(|i| format!("feature-{i}")).collect(),
                ..Default::default()
            },
            bump_file: None,
            keyring_file: None,
            keyring: Keyring::default(),
            timing: Timing::fast(),
            pool: Default::default(),
            allowed_sources: Vec::new(),
        })
        .await
        .unwrap()
    };
    let seed = start("member-00".into()).await;
    let mut members = vec![];
    for i in 1..40 {
        let m = start(format!("member-{i:02}")).await;
        assert_eq!(
            m.join(&[seed.local_addr()], Duration::from_secs(5)).await,
            1
        );
        members.push(m);
    }
    for g in [&seed, &members[5]] {
        eventually(g, "all forty are known", |m| {
            m.iter().filter(|m| m.status == Status::Alive).count() == 40
        })
        .await;
    }
    // A newcomer joins through one member and, within a second or two,
    // knows all of them (gossip alone would take many probe rounds).
    let newcomer = start("newcomer".into()).await;
    assert_eq!(
        newcomer
            .join(&[members[5].local_addr()], Duration::from_secs(5))
            .await,
        1
    );
    let started = std::time::Instant::now();
    let mut watch = newcomer.watch();
    let all = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            if watch
                .borrow_and_update()
                .iter()
                .filter(|m| m.status == Status::Alive)
                .count()
                == 41
            {
                return;
            }
            watch.changed().await.unwrap();
        }
    })
    .await;
    assert!(
        all.is_ok(),
        "after {:?} the newcomer knows {} members",
        started.elapsed(),
        newcomer.members().len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_never_merge_when_one_is_joined_at_the_others_port() {
    let lan_a = member("a", &[], "127.0.0.1:0").await;
    let wan_a = member_in(Pool::Wan, "a.dc1", &[], "127.0.0.1:0").await;
    let wan_b = member_in(Pool::Wan, "b.dc2", &[], "127.0.0.1:0").await;
    // A WAN join aimed at a LAN port finds nobody, and the LAN member
    // never learns of the WAN one.
    assert_eq!(
        wan_b
            .join(&[lan_a.local_addr()], Duration::from_secs(2))
            .await,
        0
    );
    assert_eq!(lan_a.members().len(), 1, "{:?}", lan_a.members());
    // The same pool joins.
    assert_eq!(
        wan_b
            .join(&[wan_a.local_addr()], Duration::from_secs(5))
            .await,
        1
    );
    eventually(&wan_a, "b.dc2 is alive in the WAN pool", |m| {
        status_of(m, "b.dc2") == Some(Status::Alive)
    })
    .await;
    assert!(wan_b.members().iter().all(|m| m.name != "a"));
    assert_eq!(lan_a.members().len(), 1, "{:?}", lan_a.members());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_between_members_give_each_a_coordinate_of_the_other() {
    let a = member("a", &[], "127.0.0.1:0").await;
    let b = member("b", &[], "127.0.0.1:0").await;
    assert_eq!(b.join(&[a.local_addr()], Duration::from_secs(5)).await, 1);
    for (g, other) in [(&a, "b"), (&b, "a")] {
        let mut view = g.coordinates();
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                {
                    let v = view.borrow_and_update();
                    let own = v.own.as_ref().unwrap();
                    // Several round trips in: the estimate is no longer
                    // the starting one (error 1.5) and the other is known.
                    if v.others.contains_key(other) && own.error < 1.0 {
                        return;
                    }
                }
                view.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no coordinate of {other}: {:?}", g.coordinates().borrow()));
    }
    // Loopback round trips are far below a second.
    let view = a.coordinates().borrow().clone();
    let rtt = view.own.unwrap().distance_to(&view.others["b"]);
    assert!(rtt < Duration::from_millis(100), "{rtt:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_events_reach_every_member_once_and_oversized_ones_are_refused() {
    let a = member("a", &[], "127.0.0.1:0").await;
    let b = member("b", &[], "127.0.0.1:0").await;
    assert_eq!(b.join(&[a.local_addr()], Duration::from_secs(5)).await, 1);
    let mut at_b = b.user_events();
    let event = legate_types::event::UserEvent {
        id: "1b4e28ba-2fa1-11d2-883f-0016d3cca427".into(),
        name: "deploy".into(),
        payload: Some("djI=".into()),
        node_filter: String::new(),
        service_filter: String::new(),
        tag_filter: String::new(),
        version: 1,
        ltime: 0,
    };
    let fired = a.fire_event(event.clone()).await.unwrap();
    assert_eq!(fired.ltime, 1);
    let got = tokio::time::timeout(Duration::from_secs(10), at_b.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.id, event.id);
    assert_eq!(got.ltime, 1);
    // b's clock witnessed it: b's next event is later.
    let next = b.fire_event(event.clone()).await.unwrap();
    assert!(next.ltime > 1, "{}", next.ltime);
    // The largest event the servers accept (500 payload bytes, base64,
    // with filters) still fits a datagram beside foca's header.
    let largest = legate_types::event::UserEvent {
        payload: Some("A".repeat(668)),
        node_filter: "n".repeat(4),
        service_filter: "s".repeat(4),
        tag_filter: "t".repeat(4),
        id: "2b4e28ba-2fa1-11d2-883f-0016d3cca427".into(),
        ..event.clone()
    };
    assert!(serde_json::to_vec(&largest).unwrap().len() <= 900);
    a.fire_event(largest.clone()).await.unwrap();
    loop {
        let got = tokio::time::timeout(Duration::from_secs(10), at_b.recv())
            .await
            .unwrap()
            .unwrap();
        if got.id == largest.id {
            break;
        }
    }
    // Too large for a datagram: refused to the caller, not dropped.
    let huge = legate_types::event::UserEvent {
        payload: Some("x".repeat(4000)),
        ..event
    };
    let refused = a.fire_event(huge).await.unwrap_err();
    assert!(refused.contains("cannot be spread"), "{refused}");
}
