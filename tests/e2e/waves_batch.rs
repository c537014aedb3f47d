//! `GET /api/v1/applications/waves`: the waves views of several Applications in one answer (the
//! dashboard's page). On the real control plane, each part is what the Application's own waves
//! endpoint answers the same caller: the same view and ETag, 304 while the tag sent still names
//! it, the view again once what it judged changed, the same 404 for an Application that is not
//! there, and through Argo CD's proxy the same 403 for one the authorized Application does not
//! own (whether it exists or not); bad requests are 400s naming what is wrong.

use crate::cluster;

use cluster::{Wavegate, apply, eventually};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

fn application(ns: &str, name: &str, resources: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"project": "default",
                    "source": {"repoURL": "https://git.example.com/x.git", "path": name,
                               "targetRevision": "main"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}},
           "status": {"resources": resources}})
}

/// Status, ETag and JSON body of `GET path` with `headers`.
async fn ask(wg: &Wavegate, path: &str, headers: &[(&str, &str)]) -> (u16, Option<String>, Value) {
    let mut req = reqwest::Client::new().get(format!("{}{path}", wg.url));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let etag = r
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_string());
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, etag, body)
}

/// `app=` parameters for `(namespace/name, tag held)`.
fn batch(apps: &[(&str, Option<&str>)]) -> String {
    let query: Vec<String> = apps
        .iter()
        .map(|(app, tag)| {
            let value = match tag {
                Some(t) => format!("{app}@{t}"),
                None => app.to_string(),
            };
            format!("app={}", percent(&value))
        })
        .collect();
    format!("/api/v1/applications/waves?{}", query.join("&"))
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A view without the time it was served at, which is all two answers of one view differ in.
fn timeless(mut view: Value) -> Value {
    view["timeline"]["now"] = Value::Null;
    view
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn a_batch_answers_each_application_as_its_own_endpoint_does() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "waves-batch").await;
    apply(
        &client,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "api", "namespace": ns},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "api"}},
                        "template": {"metadata": {"labels": {"app": "api"}},
                                     "spec": {"containers": [{"name": "api", "image": "example.invalid/api:1"}]}}}}),
    )
    .await;
    let deployment = json!([{"group": "apps", "version": "v1", "kind": "Deployment",
                             "namespace": ns, "name": "api", "status": "Synced", "syncWave": 0}]);
    apply(&client, application(&ns, "platform", deployment.clone())).await;
    apply(&client, application(&ns, "billing", json!([]))).await;
    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns]).await;
    let [platform, billing, absent] =
        ["platform", "billing", "absent"].map(|n| format!("{ns}/{n}"));
    let single = |app: &str| format!("/api/v1/applications/{app}/waves");

    // Each part is its own endpoint's answer: view and tag, or its error, in the order asked.
    // (Asked until two reads agree: kube-controller-manager may still be reporting the
    // Deployment's rollout, which changes the view between them.)
    let (status, _, missing) = ask(&wg, &single(&absent), &[]).await;
    assert_eq!(status, 404, "{missing}");
    let (alone, first) = eventually(
        Duration::from_secs(10),
        "the batch's view is the single endpoint's",
        || async {
            let (status, _, alone) = ask(&wg, &single(&platform), &[]).await;
            let asked = batch(&[(&platform, None), (&absent, None), (&billing, None)]);
            let (code, _, first) = ask(&wg, &asked, &[]).await;
            if status == 200
                && code == 200
                && timeless(first["applications"][0]["waves"].clone()) == timeless(alone.clone())
            {
                Ok((alone, first))
            } else {
                Err(format!("{status} {alone}\n{code} {first}"))
            }
        },
    )
    .await;
    let parts = first["applications"].as_array().unwrap();
    let names: Vec<_> = parts.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["platform", "absent", "billing"], "{first}");
    assert_eq!(parts[0]["status"], 200, "{first}");
    assert_eq!(
        parts[0]["waves"]["timeline"]["now"], first["now"],
        "every part is served at the answer's time"
    );
    assert_eq!(
        (
            &parts[1]["status"],
            &parts[1]["error"],
            parts[1].get("waves")
        ),
        (&json!(404), &missing["error"], None),
        "{first}"
    );
    assert_eq!(parts[2]["status"], 200, "{first}");
    assert!(
        alone["waves"].as_array().is_some_and(|w| !w.is_empty()),
        "{alone}"
    );

    // The tag held still names the view: 304, no view, the same tag as the single endpoint's,
    // and a later time.
    let (tag, earlier, again) = eventually(Duration::from_secs(10), "a 304 part", || async {
        let (_, single_tag, _) = ask(&wg, &single(&platform), &[]).await;
        let (_, _, b) = ask(&wg, &batch(&[(&platform, None)]), &[]).await;
        let tag = b["applications"][0]["etag"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (_, _, again) = ask(&wg, &batch(&[(&platform, Some(&tag))]), &[]).await;
        if single_tag.as_deref() == Some(tag.as_str()) && again["applications"][0]["status"] == 304
        {
            Ok((tag, b["now"].clone(), again))
        } else {
            Err(format!("{single_tag:?} {tag}: {again}"))
        }
    })
    .await;
    let part = &again["applications"][0];
    assert_eq!(
        (&part["etag"], part.get("waves"), part.get("error")),
        (&json!(tag), None, None),
        "{again}"
    );
    assert_ne!(again["now"], earlier, "the clock moves on a 304 part");

    // What the view judged changes: the same tag no longer names it, the part is the new view.
    let ar = cluster::api_resource("apps", "v1", "Deployment", "deployments");
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    let changed = eventually(
        Duration::from_secs(10),
        "a 200 part once paused",
        || async {
            let (_, _, b) = ask(&wg, &batch(&[(&platform, Some(&tag))]), &[]).await;
            let part = b["applications"][0].clone();
            let judged = &part["waves"]["waves"][0]["resources"][0]["status"];
            if part["status"] == 200 && judged == "Suspended" {
                Ok(part)
            } else {
                Err(b.to_string())
            }
        },
    )
    .await;
    assert_ne!(changed["etag"], json!(tag), "{changed}");
    let (_, now_tag, now_alone) = ask(&wg, &single(&platform), &[]).await;
    assert_eq!(changed["etag"], json!(now_tag), "{changed}");
    assert_eq!(timeless(changed["waves"].clone()), timeless(now_alone));

    // Through Argo CD's proxy, for platform: billing is not platform's, and whether an
    // Application is there or not, the part is the single route's 403, word for word.
    let proxy = [
        ("Argocd-Application-Name", format!("{ns}:platform")),
        ("Argocd-Project-Name", "default".to_string()),
        ("Argocd-Namespace", "argocd".to_string()),
    ];
    let proxy: Vec<(&str, &str)> = proxy.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (_, _, scoped) = ask(
        &wg,
        &batch(&[(&platform, None), (&billing, None), (&absent, None)]),
        &proxy,
    )
    .await;
    let parts = scoped["applications"].as_array().unwrap();
    assert_eq!(parts[0]["status"], 200, "{scoped}");
    for (part, app) in [(&parts[1], &billing), (&parts[2], &absent)] {
        let (status, _, refused) = ask(&wg, &single(app), &proxy).await;
        assert_eq!(status, 403, "{refused}");
        assert_eq!(
            (&part["status"], &part["error"], part.get("waves")),
            (&json!(403), &refused["error"], None),
            "{scoped}"
        );
    }

    // Malformed, repeated or too many: 400 with what is wrong.
    let too_many: Vec<String> = (0..51).map(|i| format!("{ns}/app-{i}")).collect();
    let too_many: Vec<(&str, Option<&str>)> = too_many.iter().map(|a| (a.as_str(), None)).collect();
    for (path, says) in [
        ("/api/v1/applications/waves".to_string(), "no application"),
        (batch(&[("platform", None)]), "no '/'"),
        (batch(&[(&platform, None), (&platform, None)]), "twice"),
        (
            format!("{}&x=1", batch(&[(&platform, None)])),
            "unknown parameter x",
        ),
        (batch(&too_many), "more than 50"),
    ] {
        let (status, _, body) = ask(&wg, &path, &[]).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains(says)),
            "{path}: {body}"
        );
    }
}
