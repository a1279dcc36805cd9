#[test]
fn scratch() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let p = kacrab::Producer::builder().set("bootstrap.servers", addr.to_string()).set("kacrab.shards","1").set("max.block.ms","3000").build().unwrap();
    let r = p.send(kacrab::ProducerRecord::new("t", bytes::Bytes::from_static(b"x"))).wait();
    println!("{r:?}");
}
