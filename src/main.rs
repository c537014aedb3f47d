fn main() {
    println!("wavegate");
}
