//! Gradient-ready hooks: each fires exactly once per backward, the moment its variable's
//! gradient is final, with that final gradient.

mod common;
use common::randn;
use std::sync::{mpsc, Arc, Mutex};
use tensor::{Device, Tensor};

type Log = Arc<Mutex<Vec<(String, Vec<f64>)>>>;

fn record(t: &Tensor, name: &str, log: &Log) {
    let (log, name) = (log.clone(), name.to_string());
    t.register_grad_hook(move |g| {
        log.lock()
            .unwrap()
            .push((name.clone(), g.to_vec::<f64>().unwrap()))
    })
    .unwrap();
}

fn names(log: &Log) -> Vec<String> {
    log.lock().unwrap().iter().map(|(n, _)| n.clone()).collect()
}

#[test]
fn a_chain_fires_from_the_last_layer_to_the_first_with_final_gradients() {
    let x = randn(&[4, 3], 1);
    let ws: Vec<Tensor> = (0..4).map(|i| randn(&[3, 3], 10 + i).to_var()).collect();
    let log: Log = Default::default();
    for (i, w) in ws.iter().enumerate() {
        record(w, &format!("w{i}"), &log);
    }
    let mut h = x;
    for w in &ws {
        h = h.matmul(w).unwrap().tanh().unwrap();
    }
    let grads = h.sum_all().unwrap().backward().unwrap();
    assert_eq!(names(&log), ["w3", "w2", "w1", "w0"]);
    for (i, w) in ws.iter().enumerate() {
        let (_, g) = &log.lock().unwrap()[3 - i];
        assert_eq!(
            g,
            &grads.get(w).unwrap().to_vec::<f64>().unwrap(),
            "hook of w{i} saw a non-final gradient"
        );
    }
}

#[test]
fn one_call_per_backward() {
    let w = randn(&[3], 2).to_var();
    let count = Arc::new(Mutex::new(0));
    let c = count.clone();
    w.register_grad_hook(move |_| *c.lock().unwrap() += 1)
        .unwrap();
    for expected in 1..=3 {
        w.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        assert_eq!(*count.lock().unwrap(), expected);
    }
}

#[test]
fn a_weight_reused_at_every_time_step_fires_once_after_its_last_use() {
    // h_t = tanh(h_{t-1} W + x_t U): W and U are consumed at every step; backward meets
    // their last consumer at step 0, after every x_t for t >= 1 is final.
    let steps = 5;
    let w = (randn(&[3, 3], 3).affine(0.5, 0.0).unwrap()).to_var();
    let u = randn(&[2, 3], 4).to_var();
    let xs: Vec<Tensor> = (0..steps)
        .map(|t| randn(&[1, 2], 20 + t as u64).to_var())
        .collect();
    let log: Log = Default::default();
    record(&w, "W", &log);
    record(&u, "U", &log);
    for (t, x) in xs.iter().enumerate() {
        record(x, &format!("x{t}"), &log);
    }
    let mut h = Tensor::zeros(vec![1, 3], tensor::DType::F64, Device::Cpu).unwrap();
    for x in &xs {
        h = h
            .matmul(&w)
            .unwrap()
            .add(&x.matmul(&u).unwrap())
            .unwrap()
            .tanh()
            .unwrap();
    }
    let grads = h.sum_all().unwrap().backward().unwrap();
    let order = names(&log);
    assert_eq!(
        order.iter().filter(|n| *n == "W").count(),
        1,
        "W fired more than once: {order:?}"
    );
    assert_eq!(order.iter().filter(|n| *n == "U").count(), 1);
    let pos = |n: &str| order.iter().position(|o| o == n).unwrap();
    for t in 1..steps {
        assert!(
            pos("W") > pos(&format!("x{t}")),
            "W fired before its last use: {order:?}"
        );
        assert!(
            pos("U") > pos(&format!("x{t}")),
            "U fired before its last use: {order:?}"
        );
    }
    // Later steps' inputs become final first.
    for t in 1..steps {
        assert!(
            pos(&format!("x{t}")) < pos(&format!("x{}", t - 1)),
            "{order:?}"
        );
    }
    let logged = log.lock().unwrap();
    let w_seen = &logged.iter().find(|(n, _)| n == "W").unwrap().1;
    assert_eq!(w_seen, &grads.get(&w).unwrap().to_vec::<f64>().unwrap());
}

#[test]
fn a_leaf_shared_by_two_branches_fires_once_with_the_sum() {
    let w = randn(&[4], 5).to_var();
    let a = randn(&[4], 6);
    let b = randn(&[4], 7);
    let log: Log = Default::default();
    record(&w, "w", &log);
    let y = w
        .mul(&a)
        .unwrap()
        .add(&w.mul(&b).unwrap().exp().unwrap())
        .unwrap()
        .sum_all()
        .unwrap();
    let grads = y.backward().unwrap();
    assert_eq!(names(&log), ["w"]);
    let g = grads.get(&w).unwrap().to_vec::<f64>().unwrap();
    let (wv, av, bv) = (
        w.to_vec::<f64>().unwrap(),
        a.to_vec::<f64>().unwrap(),
        b.to_vec::<f64>().unwrap(),
    );
    for i in 0..4 {
        let want = av[i] + bv[i] * (wv[i] * bv[i]).exp();
        assert!((g[i] - want).abs() < 1e-12);
    }
    assert_eq!(log.lock().unwrap()[0].1, g);
}

#[test]
fn a_variable_with_only_non_differentiable_uses_fires_with_zeros() {
    let w = randn(&[3], 8).to_var();
    let v = randn(&[3], 9).to_var();
    let log: Log = Default::default();
    record(&w, "w", &log);
    // The comparison makes no graph edge to w, so w is not reached at all: no hook.
    let mask = w.gt(&v).unwrap();
    let y = v.mul(&mask).unwrap().sum_all().unwrap();
    y.backward().unwrap();
    assert!(names(&log).is_empty());
    // Reached only through `sign` (zero gradient): fires once, with zeros.
    let y = w.sign().unwrap().mul(&v).unwrap().sum_all().unwrap();
    y.backward().unwrap();
    assert_eq!(names(&log), ["w"]);
    assert_eq!(log.lock().unwrap()[0].1, vec![0.0; 3]);
}

#[test]
fn hooks_can_hand_gradients_to_another_thread() {
    let ws: Vec<Tensor> = (0..3).map(|i| randn(&[8], 30 + i).to_var()).collect();
    let (tx, rx) = mpsc::channel::<(usize, Tensor)>();
    for (i, w) in ws.iter().enumerate() {
        let tx = tx.clone();
        w.register_grad_hook(move |g| tx.send((i, g.clone())).unwrap())
            .unwrap();
    }
    drop(tx);
    let consumer = std::thread::spawn(move || {
        rx.iter()
            .map(|(i, g)| (i, g.sum_all().unwrap().to_scalar::<f64>().unwrap()))
            .collect::<Vec<_>>()
    });
    let y = ws[0]
        .mul(&ws[1])
        .unwrap()
        .mul(&ws[2])
        .unwrap()
        .sum_all()
        .unwrap();
    y.backward().unwrap();
    for w in &ws {
        w.clear_grad_hooks();
    }
    let got = consumer.join().unwrap();
    assert_eq!(got.len(), 3);
}

#[test]
fn hooks_only_on_variables_and_a_variable_loss_fires_immediately() {
    let t = randn(&[2], 40);
    assert!(t.register_grad_hook(|_| {}).is_err());
    let v = randn(&[1], 41).to_var();
    let log: Log = Default::default();
    record(&v, "v", &log);
    v.backward().unwrap();
    assert_eq!(names(&log), ["v"]);
}

/// A hook may clear or register hooks on its own variable (it deadlocked on the hook
/// list's lock), and a hook that panics leaves the hooks usable for later backwards.
#[test]
fn hooks_may_change_their_own_list_and_a_panic_does_not_poison_it() {
    let w = randn(&[3], 1).to_var();
    let fired: Arc<Mutex<Vec<&str>>> = Default::default();
    // Fires once, then removes itself (and every hook of w), registering a successor.
    let (w2, f) = (w.clone(), fired.clone());
    w.register_grad_hook(move |_| {
        f.lock().unwrap().push("once");
        w2.clear_grad_hooks();
        let f2 = f.clone();
        w2.register_grad_hook(move |_| f2.lock().unwrap().push("successor"))
            .unwrap();
    })
    .unwrap();
    for _ in 0..3 {
        w.sqr().unwrap().sum_all().unwrap().backward().unwrap();
    }
    assert_eq!(*fired.lock().unwrap(), ["once", "successor", "successor"]);

    let v = randn(&[2], 2).to_var();
    let calls = Arc::new(Mutex::new(0));
    let c = calls.clone();
    v.register_grad_hook(move |_| {
        let n = {
            let mut n = c.lock().unwrap();
            *n += 1;
            *n
        };
        if n == 1 {
            panic!("the first call panics");
        }
    })
    .unwrap();
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        v.sum_all().unwrap().backward()
    }));
    assert!(first.is_err());
    // The hook is still registered and the list is not poisoned.
    v.sum_all().unwrap().backward().unwrap();
    assert_eq!(*calls.lock().unwrap(), 2);
}
