//! The papers' models: exact parameter counts, PyTorch-style names, output shapes, and an
//! end-to-end check that the whole stack learns (a CIFAR ResNet fits a small synthetic
//! task to near-zero training loss).

use nn::optim::{Optimizer, Sgd};
use nn::{models, Ctx, Module};
use tensor::{DType, Device, Rng, Tensor};

fn count(name: &str) -> usize {
    models::by_name(name, &mut Rng::new(0))
        .unwrap()
        .param_count()
}

#[test]
fn parameter_counts_match_the_papers() {
    // DGC: ResNet-50 97.49 MiB, AlexNet 232.56 MiB, LSTM language model 194.68 MiB.
    assert_eq!(count("resnet50"), 25_557_032);
    assert_eq!(count("alexnet"), 60_965_224);
    assert_eq!(count("lstm_lm"), 51_034_000);
    let mib = |n: usize| n as f64 * 4.0 / (1u64 << 20) as f64;
    assert_eq!(format!("{:.2}", mib(25_557_032)), "97.49");
    assert_eq!(format!("{:.2}", mib(60_965_224)), "232.56");
    assert_eq!(format!("{:.2}", mib(51_034_000)), "194.68");
    // He et al.: ResNet-110 has about 1.7 M parameters.
    let r110 = count("resnet110");
    assert!((1_720_000..=1_740_000).contains(&r110), "{r110}");
    // ResNet-20: 432 + 32 (stem) + 3·(2·2304 + 64) + (4608 + 9216 + 128) + 2·(2·9216 + 128)
    //          + (18432 + 36864 + 256) + 2·(2·36864 + 256) + 650 (fc) = 269,722.
    assert_eq!(count("resnet20"), 269_722);
    assert_eq!(count("lenet5"), 431_080);
    assert_eq!(count("vgg16"), 14_728_266);
    assert_eq!(count("lstm_lm_medium"), 13_280_400);
    // DGC's DeepSpeech (7 bidirectional GRU layers of 1200) within 5 % of 488.08 MiB.
    let ds = mib(count("deepspeech"));
    assert!((ds / 488.08 - 1.0).abs() < 0.05, "DeepSpeech {ds:.2} MiB");
}

/// AlexNet's biases are the BVLC model's: 0 for conv1, conv3 and fc8, 0.1 for the others
/// (its readme: 1, Krizhevsky et al.'s value, "gave flat loss").
#[test]
fn alexnet_biases_follow_the_bvlc_model() {
    let m = models::by_name("alexnet", &mut Rng::new(0)).unwrap();
    let mut seen = 0;
    for p in m.named_params() {
        let Some(layer) = p.name.strip_suffix(".bias") else {
            continue;
        };
        seen += 1;
        let want = if ["conv1", "conv3", "fc8"].contains(&layer) {
            0.0
        } else {
            0.1
        };
        let v = p.tensor.to_vec::<f32>().unwrap();
        assert!(v.iter().all(|&x| x == want), "{}: {}", p.name, v[0]);
    }
    // Five convolutions and three fully connected layers: none skipped by its name.
    assert_eq!(seen, 8, "AlexNet's bias names changed");
}

/// Model `name`'s parameter names, in order.
fn param_names(name: &str) -> Vec<String> {
    let m = models::by_name(name, &mut Rng::new(0)).unwrap();
    m.named_params().into_iter().map(|p| p.name).collect()
}

#[test]
fn names_are_pytorch_style_unique_and_ordered() {
    for name in models::names() {
        let names = param_names(name);
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(
            unique.len(),
            names.len(),
            "{name}: duplicate parameter names"
        );
    }
    let r20 = param_names("resnet20");
    assert_eq!(
        r20[..4],
        [
            "conv1.weight",
            "bn1.weight",
            "bn1.bias",
            "layer1.0.conv1.weight"
        ]
    );
    assert_eq!(
        r20[r20.len() - 3..],
        ["layer3.2.bn2.bias", "fc.weight", "fc.bias"]
    );
    let r50 = param_names("resnet50");
    assert!(r50.contains(&"layer1.0.downsample.0.weight".to_string()));
    assert!(r50.contains(&"layer4.2.bn3.bias".to_string()));
    assert_eq!(
        r50.len(),
        161,
        "torchvision's ResNet-50 has 161 parameter tensors"
    );
    let lm = param_names("lstm_lm");
    assert_eq!(
        lm,
        [
            "encoder.weight",
            "rnn.weight_ih_l0",
            "rnn.weight_hh_l0",
            "rnn.bias_ih_l0",
            "rnn.bias_hh_l0",
            "rnn.weight_ih_l1",
            "rnn.weight_hh_l1",
            "rnn.bias_ih_l1",
            "rnn.bias_hh_l1",
            "decoder.bias"
        ]
    );
}

#[test]
fn outputs_have_the_expected_shapes() {
    let mut rng = Rng::new(1);
    for (name, batch) in [("resnet20", 2), ("vgg16", 2), ("lenet5", 3)] {
        let m = models::by_name(name, &mut rng).unwrap();
        let mut shape = vec![batch];
        shape.extend(models::input_shape(name).unwrap());
        let x = Tensor::randn(shape, 0.0, 1.0, DType::F32, Device::Cpu, &mut rng).unwrap();
        assert_eq!(
            m.forward(&x, &mut Ctx::eval()).unwrap().dims(),
            [batch, 10],
            "{name}"
        );
    }
    let lm = models::lstm_lm(50, 16, 0.0, &mut rng).unwrap();
    let ids = Tensor::from_vec((0..12u32).collect::<Vec<_>>(), vec![4, 3], Device::Cpu).unwrap();
    assert_eq!(
        lm.forward(&ids, &mut Ctx::eval()).unwrap().dims(),
        [4, 3, 50]
    );
    // A small DeepSpeech: 161 bins, 9 frames → ⌈9/2⌉ = 5 output frames of 29 classes.
    let ds = models::deepspeech(nn::layers::RnnKind::Gru, 2, 8, 29, &mut rng).unwrap();
    let spec = Tensor::randn(
        vec![2, 1, 161, 9],
        0.0,
        1.0,
        DType::F32,
        Device::Cpu,
        &mut rng,
    )
    .unwrap();
    assert_eq!(
        ds.forward(&spec, &mut Ctx::train(0)).unwrap().dims(),
        [5, 2, 29]
    );
    assert_eq!(models::conv_rows(161), 41);
    // Narrowed to 4 channels: the convolutions and their batch norms shrink, and the
    // first recurrent layer reads 4 · 41 features instead of 32 · 41.
    let narrow =
        models::DeepSpeech::with_channels(nn::layers::RnnKind::Gru, 2, 8, 4, 29, &mut rng).unwrap();
    assert_eq!(
        narrow.forward(&spec, &mut Ctx::train(0)).unwrap().dims(),
        [5, 2, 29]
    );
    let count = |m: &dyn Module| -> usize {
        let mut p = Vec::new();
        m.params("", &mut p);
        p.iter().map(|t| t.tensor.elem_count()).sum()
    };
    // Convolutions (weights and biases) and their batch norms (scale and shift).
    let front = |c: usize| (41 * 11 * c + c) + 2 * c + (21 * 11 * c * c + c) + 2 * c;
    // A bidirectional GRU's first layer: 3 gates × (input + hidden + 2 biases) × 2.
    let first_gru = |c: usize| 2 * 3 * 8 * (c * 41 + 8 + 2);
    assert_eq!(
        count(&ds) - count(&narrow),
        front(32) + first_gru(32) - front(4) - first_gru(4)
    );
    assert!(
        models::DeepSpeech::with_channels(nn::layers::RnnKind::Gru, 2, 8, 0, 29, &mut rng).is_err()
    );
}

/// 64 images of 3×16×16, 4 classes: the class is the quadrant holding a bright patch.
fn quadrant_task(rng: &mut Rng) -> (Tensor, Vec<u32>) {
    let n = 64;
    let mut data = vec![0f32; n * 3 * 16 * 16];
    let mut labels = Vec::new();
    for i in 0..n {
        let class = i % 4;
        labels.push(class as u32);
        let (y0, x0) = ((class / 2) * 8, (class % 2) * 8);
        for c in 0..3 {
            for y in 0..16 {
                for x in 0..16 {
                    let noise = (rng.normal() * 0.3) as f32;
                    let bright = (y0..y0 + 8).contains(&y) && (x0..x0 + 8).contains(&x);
                    data[((i * 3 + c) * 16 + y) * 16 + x] = noise + if bright { 1.0 } else { 0.0 };
                }
            }
        }
    }
    (
        Tensor::from_vec(data, vec![n, 3, 16, 16], Device::Cpu).unwrap(),
        labels,
    )
}

#[test]
fn resnet20_fits_a_learnable_task() {
    let mut rng = Rng::new(3);
    let model = models::resnet_cifar(20, 3, 4, &mut rng).unwrap();
    let params: Vec<Tensor> = model.named_params().into_iter().map(|p| p.tensor).collect();
    let mut opt = Sgd::new(0.05, 0.9, false, 0.0).unwrap();
    let (images, labels) = quadrant_task(&mut rng);
    let mut ctx = Ctx::train(0);
    let batch = 16;
    let mut losses = Vec::new();
    for step in 0..60 {
        let start = (step * batch) % 64;
        let x = images.narrow(0, start, batch).unwrap();
        let y =
            Tensor::from_vec(labels[start..start + batch].to_vec(), batch, Device::Cpu).unwrap();
        let loss = model
            .forward(&x, &mut ctx)
            .unwrap()
            .cross_entropy(&y, None)
            .unwrap();
        losses.push(loss.to_scalar::<f32>().unwrap());
        let grads = loss.backward().unwrap();
        opt.step(&params, &grads).unwrap();
    }
    eprintln!("losses: {:?}", losses.iter().step_by(5).collect::<Vec<_>>());
    let last: f32 = losses[losses.len() - 4..].iter().sum::<f32>() / 4.0;
    assert!(losses[0] > 1.0, "initial loss {}", losses[0]);
    assert!(last < 0.05, "training loss did not reach near zero: {last}");
}

/// In a padded batch, an utterance's logits (evaluation mode) are those it has alone: the
/// convolution blocks zero the padded frames and the recurrent layers' reverse direction
/// starts at its own last frame (deepspeech.pytorch's MaskConv and packed sequences).
/// Without the lengths, padding reaches every frame through the reverse direction.
#[test]
fn deepspeech_logits_do_not_depend_on_the_batchs_padding() {
    for kind in [nn::layers::RnnKind::Gru, nn::layers::RnnKind::Lstm] {
        let mut rng = Rng::new(11);
        let ds = models::deepspeech(kind, 2, 8, 29, &mut rng).unwrap();
        let mut spectrogram = |frames: usize| {
            let dims = vec![1, 1, 161, frames];
            Tensor::randn(dims, 0.0, 1.0, DType::F32, Device::Cpu, &mut rng).unwrap()
        };
        let (alone, other) = (spectrogram(20), spectrogram(40));
        // The batch: our 20 frames zero-padded to 40, beside a 40-frame utterance.
        let pad = Tensor::zeros(vec![1, 1, 161, 20], DType::F32, Device::Cpu).unwrap();
        let padded = Tensor::cat(&[alone.clone(), pad], 3).unwrap();
        let batch = Tensor::cat(&[padded, other], 0).unwrap();
        // Our sample's 10 output frames of a batch's logits.
        let ours = |logits: Tensor| -> Vec<f32> {
            logits
                .narrow(0, 0, 10)
                .and_then(|l| l.narrow(1, 0, 1))
                .and_then(|l| l.to_vec::<f32>())
                .unwrap()
        };
        let largest_gap = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max)
        };
        let own = ds
            .forward(&alone, &mut Ctx::eval())
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let in_batch = ours(
            ds.forward_lengths(&batch, &[20, 40], &mut Ctx::eval())
                .unwrap(),
        );
        let worst = largest_gap(&own, &in_batch);
        assert!(worst < 1e-4, "{kind:?}: logits differ by {worst}");
        // Ignoring the lengths, the padding shows.
        let blind = ours(ds.forward(&batch, &mut Ctx::eval()).unwrap());
        let off = largest_gap(&own, &blind);
        assert!(off > 1e-3, "{kind:?}: padding had no effect ({off})");
    }
}

/// Each entry of the registry builds, by its own name, a model that reads the input its
/// entry states: an image model's paper input gives `[N, outputs]`, and a model built for
/// another fitting shape (a CIFAR ResNet on 1-channel 28×28 images) works too.
#[test]
fn registry_entries_build_what_they_state() {
    let mut rng = Rng::new(3);
    let mut seen = std::collections::HashSet::new();
    for info in models::MODELS {
        assert!(seen.insert(info.name), "{} twice", info.name);
        assert_eq!(models::find(info.name).unwrap().name, info.name);
        let built = (info.build)(&info.paper_spec(), &mut rng).unwrap();
        let kind = match &built {
            models::Model::Image(_) => models::Kind::Image,
            models::Model::Language(_) => models::Kind::Language,
            models::Model::Speech(_) => models::Kind::Speech,
        };
        assert_eq!(kind, info.kind, "{}", info.name);
        assert_eq!(
            info.paper_image().is_some(),
            info.kind == models::Kind::Image,
            "{}",
            info.name
        );
    }
    let err = models::find("resnet21").err().unwrap().to_string();
    assert!(err.contains("known models: resnet20"), "{err}");
    let r20 = models::find("resnet20").unwrap();
    let spec = models::Spec {
        image: [1, 28, 28],
        ..r20.paper_spec()
    };
    let m = (r20.build)(&spec, &mut rng).unwrap().into_module();
    let x = Tensor::randn(
        vec![2, 1, 28, 28],
        0.0,
        1.0,
        DType::F32,
        Device::Cpu,
        &mut rng,
    )
    .unwrap();
    assert_eq!(m.forward(&x, &mut Ctx::eval()).unwrap().dims(), [2, 10]);
    // The help lists every model under its kind.
    let help = models::help_text();
    for info in models::MODELS {
        assert!(help.contains(info.name), "{help}");
    }
}

/// One training step (forward, loss, backward, clipping, update), counting reads to the
/// host: none may happen, because on a GPU each one waits for every queued kernel. The
/// count is the tensor crate's and the same on every device, so this CPU test guards the
/// device-independent code (layers, autograd, losses, optimizers); tensor's
/// `training_step_does_not_synchronise` checks the CUDA backend itself on a GPU.
fn step_reads(
    model: &dyn Module,
    x: &Tensor,
    labels: &Tensor,
    opt: &mut dyn Optimizer,
    clip: bool,
) -> u64 {
    let params: Vec<Tensor> = model.named_params().into_iter().map(|p| p.tensor).collect();
    let mut ctx = Ctx::train(0);
    let before = tensor::host_reads();
    let logits = model.forward(x, &mut ctx).unwrap();
    let classes = *logits.dims().last().unwrap();
    let loss = logits
        .reshape(vec![logits.elem_count() / classes, classes])
        .unwrap()
        .cross_entropy(labels, None)
        .unwrap();
    let grads = loss.backward().unwrap();
    let mut gs: Vec<Tensor> = params
        .iter()
        .map(|p| grads.get(p).unwrap().clone())
        .collect();
    if clip {
        nn::optim::clip_grad_norm(&mut gs, 0.25).unwrap();
    }
    for (i, (p, g)) in params.iter().zip(&gs).enumerate() {
        opt.update(i, p, g).unwrap();
    }
    tensor::host_reads() - before
}

#[test]
fn a_training_step_reads_nothing_to_the_host() {
    let mut rng = Rng::new(5);
    let resnet = models::resnet_cifar(20, 3, 4, &mut rng).unwrap();
    let (images, labels) = quadrant_task(&mut rng);
    let x = images.narrow(0, 0, 8).unwrap();
    let y = Tensor::from_vec(labels[..8].to_vec(), 8, Device::Cpu).unwrap();
    let mut sgd = Sgd::new(0.05, 0.9, false, 1e-4).unwrap();
    assert_eq!(
        step_reads(&resnet, &x, &y, &mut sgd, false),
        0,
        "ResNet-20 with SGD"
    );

    // The language model: embedding, fused LSTM sequence, dropout, clipping, Adam.
    let lm = models::lstm_lm(40, 16, 0.2, &mut rng).unwrap();
    let ids: Vec<u32> = (0..5 * 3).map(|i| (i * 7 % 40) as u32).collect();
    let targets: Vec<u32> = (0..5 * 3).map(|i| (i * 11 % 40) as u32).collect();
    let ids = Tensor::from_vec(ids, vec![5, 3], Device::Cpu).unwrap();
    let targets = Tensor::from_vec(targets, 15, Device::Cpu).unwrap();
    let mut adam = nn::optim::Adam::new(1e-3, 0.9, 0.999, 1e-8, 0.0);
    assert_eq!(
        step_reads(&lm, &ids, &targets, &mut adam, true),
        0,
        "LSTM LM with Adam"
    );
}

/// DeepSpeech's step with its CTC loss reads nothing to the host either: the per-sample
/// losses and their reduction stay where the log-probabilities are.
#[test]
fn a_ctc_training_step_reads_nothing_to_the_host() {
    let mut rng = Rng::new(6);
    let model =
        models::DeepSpeech::with_channels(nn::layers::RnnKind::Lstm, 2, 8, 4, 5, &mut rng).unwrap();
    let x = Tensor::randn(
        vec![2, 1, 161, 12],
        0.0,
        1.0,
        tensor::DType::F32,
        Device::Cpu,
        &mut rng,
    )
    .unwrap();
    let params: Vec<Tensor> = model.named_params().into_iter().map(|p| p.tensor).collect();
    let mut opt = Sgd::new(1e-3, 0.9, false, 0.0).unwrap();
    let mut ctx = Ctx::train(0);
    for reduction in [
        nn::loss::CtcReduction::BatchMean,
        nn::loss::CtcReduction::Mean,
    ] {
        let before = tensor::host_reads();
        let logits = model.forward_lengths(&x, &[12, 9], &mut ctx).unwrap();
        let lengths = [logits.dims()[0], logits.dims()[0] - 1];
        // The second target cannot be aligned in its frames: zero_infinity's path.
        let targets = vec![vec![1, 2, 3], vec![4; 9]];
        let loss = nn::loss::ctc_loss(
            &logits.log_softmax(2).unwrap(),
            &targets,
            &lengths,
            reduction,
            true,
        )
        .unwrap();
        let grads = loss.backward().unwrap();
        opt.step(&params, &grads).unwrap();
        assert_eq!(tensor::host_reads() - before, 0, "{reduction:?}");
    }
}
