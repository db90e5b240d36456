//! The data module as the experiment runner uses it: offline folders in, `f32` batches out.

use homeadam_host::data::batches::{minibatches, EpochOrder, Images};
use homeadam_host::data::wikitext::{self, Corpus, TextSplit};
use homeadam_host::data::{cifar10, digits, shipped_dir, Split};

#[test]
fn digits_train_split_batches_cover_it_once_per_epoch() {
    let set = digits::load(&digits::shipped_path()).unwrap();
    let (train, test) = digits::split(&set, 0.2, 42).unwrap();
    // 20% of each class, rounded per class: 359 of 1,797.
    assert_eq!((train.n, test.n), (1438, 359));
    let order = EpochOrder::shuffled(train.n, 42, 0);
    let batches: Vec<_> = minibatches(&train, &order, 64, false, false, 0)
        .unwrap()
        .collect();
    assert_eq!(batches.len(), 23);
    assert_eq!(batches.iter().map(|b| b.len()).sum::<usize>(), train.n);
    assert!(batches.iter().all(|b| b.x.len() == b.len() * 64));
    let mut counts = [0usize; 10];
    batches
        .iter()
        .flat_map(|b| &b.labels)
        .for_each(|&l| counts[l as usize] += 1);
    assert_eq!(counts.iter().sum::<usize>(), train.n);
}

#[test]
fn cifar_offline_folder_to_augmented_batches() {
    let dir = tempfile::tempdir().unwrap();
    let record = |label: u8, value: u8| {
        let mut r = vec![value; cifar10::RECORD];
        r[0] = label;
        r
    };
    for (k, file) in cifar10::TRAIN_FILES.iter().enumerate() {
        let bytes: Vec<u8> = (0..4).flat_map(|i| record(i, 50 * k as u8 + i)).collect();
        std::fs::write(dir.path().join(file), bytes).unwrap();
    }
    let train = cifar10::load(Some(dir.path()), Split::Train).unwrap();
    assert_eq!(train.n, 20);
    // The test file is absent: the error names it, and nothing is downloaded.
    let err = cifar10::load(Some(dir.path()), Split::Test).unwrap_err();
    assert!(format!("{err:#}").contains("test_batch.bin"), "{err:#}");

    let images = Images::new(train.clone(), cifar10::normalization(), 4).unwrap();
    let order = EpochOrder::shuffled(train.n, 9, 1);
    let epoch: Vec<_> = minibatches(&images, &order, 8, true, true, 0).unwrap().collect();
    assert_eq!(epoch.len(), 2);
    assert_eq!(epoch[0].x.len(), 8 * 3072);
    // A resumed run rebuilds the order from (seed, epoch) and skips the batches done.
    let resumed: Vec<_> = minibatches(&images, &EpochOrder::shuffled(train.n, 9, 1), 8, true, true, 1)
        .unwrap()
        .collect();
    assert_eq!(resumed[..], epoch[1..]);
}

#[test]
fn wikitext2_shipped_valid_and_test_make_lm_windows() {
    let dir = shipped_dir().join("wikitext-2");
    let valid = wikitext::locate(Corpus::WikiText2, TextSplit::Valid, Some(&dir)).unwrap();
    let test = wikitext::locate(Corpus::WikiText2, TextSplit::Test, Some(&dir)).unwrap();
    let vocab = wikitext::vocab_from_file(&valid).unwrap();
    let ids = wikitext::read_split(&test, &vocab).unwrap().ids;
    let columns = wikitext::batchify(&ids, 32);
    assert_eq!(columns.len(), 32);
    let rows = ids.len() / 32;
    let windows: Vec<_> = wikitext::windows(&columns, 35).collect();
    assert_eq!(windows.len(), (rows - 1).div_ceil(35));
    let w = &windows[0];
    assert_eq!((w.batch, w.len, w.input.len()), (32, 35, 32 * 35));
    // Column b is the b-th contiguous stretch; the target is the input shifted by one token.
    assert_eq!(w.input[35..70], ids[rows..rows + 35]);
    assert_eq!(w.target[35..70], ids[rows + 1..rows + 36]);
    // The training split is not shipped: an offline folder without it is an error, not a download.
    let err = wikitext::locate(Corpus::WikiText2, TextSplit::Train, Some(&dir)).unwrap_err();
    assert!(
        format!("{err:#}").contains("wiki.train.tokens or train.txt"),
        "{err:#}"
    );
}
