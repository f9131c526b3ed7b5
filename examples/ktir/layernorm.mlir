// Layer norm over the rows of a 64 x 128 fp32 matrix, y = (x - mean) / sqrt(var + 1e-5) * w + b,
// on 32 compute tiles of two rows. Every step is a linalg.generic: the row sums are generics with
// a "reduction" last iterator, and the weight and bias reach each row through indexing maps that
// keep only the column.
#two_rows = affine_set<(d0, d1) : (d0 >= 0, -d0 + 1 >= 0, d1 >= 0, -d1 + 127 >= 0)>
#vec = affine_set<(d0) : (d0 >= 0, -d0 + 127 >= 0)>
#full = affine_map<(d0, d1) -> (d0, d1)>
#per_row = affine_map<(d0, d1) -> (d0)>
#per_col = affine_map<(d0, d1) -> (d1)>

module {
  func.func @layer_norm(%in: index, %weight: index, %bias: index, %out: index) attributes {grid = [32]} {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %zero = arith.constant 0.0 : f32
    %inv_n = arith.constant 0.0078125 : f32
    %eps = arith.constant 1.0e-5 : f32
    %id = ktdp.get_compute_tile_id : index
    %r0 = arith.muli %id, %c2 : index

    %X = ktdp.construct_memory_view %in, sizes: [64, 128], strides: [128, 1] {
      coordinate_set = affine_set<(d0, d1) : (d0 >= 0, -d0 + 63 >= 0, d1 >= 0, -d1 + 127 >= 0)>,
      memory_space = #ktdp.memory_space<global>
    } : memref<64x128xf32>
    %W = ktdp.construct_memory_view %weight, sizes: [128], strides: [1] {
      coordinate_set = #vec, memory_space = #ktdp.memory_space<global>
    } : memref<128xf32>
    %B = ktdp.construct_memory_view %bias, sizes: [128], strides: [1] {
      coordinate_set = #vec, memory_space = #ktdp.memory_space<global>
    } : memref<128xf32>
    %Y = ktdp.construct_memory_view %out, sizes: [64, 128], strides: [128, 1] {
      coordinate_set = affine_set<(d0, d1) : (d0 >= 0, -d0 + 63 >= 0, d1 >= 0, -d1 + 127 >= 0)>,
      memory_space = #ktdp.memory_space<global>
    } : memref<64x128xf32>

    %xt = ktdp.construct_access_tile %X[%r0, %c0] {access_tile_set = #two_rows}
        : memref<64x128xf32> -> !ktdp.access_tile<2x128xindex>
    %x = ktdp.load %xt : !ktdp.access_tile<2x128xindex> -> tensor<2x128xf32>
    %wt = ktdp.construct_access_tile %W[%c0] {access_tile_set = #vec} : memref<128xf32> -> !ktdp.access_tile<128xindex>
    %w = ktdp.load %wt : !ktdp.access_tile<128xindex> -> tensor<128xf32>
    %bt = ktdp.construct_access_tile %B[%c0] {access_tile_set = #vec} : memref<128xf32> -> !ktdp.access_tile<128xindex>
    %b = ktdp.load %bt : !ktdp.access_tile<128xindex> -> tensor<128xf32>

    // mean = sum(x) / n
    %s0 = tensor.empty() : tensor<2xf32>
    %s1 = linalg.fill ins(%zero : f32) outs(%s0 : tensor<2xf32>) -> tensor<2xf32>
    %sum = linalg.generic {indexing_maps = [#full, #per_row], iterator_types = ["parallel", "reduction"]}
        ins(%x : tensor<2x128xf32>) outs(%s1 : tensor<2xf32>) {
      ^bb0(%v: f32, %acc: f32):
        %t = arith.addf %v, %acc : f32
        linalg.yield %t : f32
    } -> tensor<2xf32>

    // centred = x - sum / n
    %c_init = tensor.empty() : tensor<2x128xf32>
    %centred = linalg.generic {indexing_maps = [#full, #per_row, #full], iterator_types = ["parallel", "parallel"]}
        ins(%x, %sum : tensor<2x128xf32>, tensor<2xf32>) outs(%c_init : tensor<2x128xf32>) {
      ^bb0(%v: f32, %s: f32, %o: f32):
        %mean = arith.mulf %s, %inv_n : f32
        %d = arith.subf %v, %mean : f32
        linalg.yield %d : f32
    } -> tensor<2x128xf32>

    // var * n = sum(centred^2)
    %q0 = tensor.empty() : tensor<2xf32>
    %q1 = linalg.fill ins(%zero : f32) outs(%q0 : tensor<2xf32>) -> tensor<2xf32>
    %sq = linalg.generic {indexing_maps = [#full, #per_row], iterator_types = ["parallel", "reduction"]}
        ins(%centred : tensor<2x128xf32>) outs(%q1 : tensor<2xf32>) {
      ^bb0(%v: f32, %acc: f32):
        %p = arith.mulf %v, %v : f32
        %t = arith.addf %p, %acc : f32
        linalg.yield %t : f32
    } -> tensor<2xf32>

    // y = centred * rsqrt(sq / n + eps) * w + b
    %y_init = tensor.empty() : tensor<2x128xf32>
    %y = linalg.generic {indexing_maps = [#full, #per_row, #per_col, #per_col, #full],
                         iterator_types = ["parallel", "parallel"]}
        ins(%centred, %sq, %w, %b : tensor<2x128xf32>, tensor<2xf32>, tensor<128xf32>, tensor<128xf32>)
        outs(%y_init : tensor<2x128xf32>) {
      ^bb0(%v: f32, %q: f32, %wv: f32, %bv: f32, %o: f32):
        %var = arith.mulf %q, %inv_n : f32
        %ve = arith.addf %var, %eps : f32
        %rstd = math.rsqrt %ve : f32
        %n = arith.mulf %v, %rstd : f32
        %sc = arith.mulf %n, %wv : f32
        %r = arith.addf %sc, %bv : f32
        linalg.yield %r : f32
    } -> tensor<2x128xf32>

    %yt = ktdp.construct_access_tile %Y[%r0, %c0] {access_tile_set = #two_rows}
        : memref<64x128xf32> -> !ktdp.access_tile<2x128xindex>
    ktdp.store %y, %yt : tensor<2x128xf32>, !ktdp.access_tile<2x128xindex>
    return
  }
}
