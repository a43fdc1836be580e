//! Mesa's llvmpipe, the software rasteriser a Linux user would pick to
//! render without a GPU, as the independent reference the stack is judged
//! against: the same scene `agx-render` draws (an indexed mesh with
//! per-pixel Phong shading and a linearly filtered, repeating RGBA8
//! texture, depth-tested), rendered through Debian's Mesa with EGL on the
//! surfaceless platform and OpenGL ES 3.0, read back as RGBA8 rows.
//!
//! Nothing here knows the AGX stack: the scene arrives as plain numbers,
//! so the reference shares no code with what it checks. libEGL is opened
//! at run time (`libEGL.so.1`, Debian's `libegl1` with `libegl-mesa0`),
//! so building needs no EGL; a machine without it gets [`Error::Load`].
//!
//! GL calls are unsafe because they act on the thread's current context:
//! a [`Llvmpipe`] is neither `Send` nor `Sync` and makes its context
//! current at the start of every method, so each call goes to its own
//! context on the thread that created it.

use std::marker::PhantomData;

use glow::HasContext;
use khronos_egl as egl;

/// Why the reference could not render.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// libEGL could not be opened or lacks EGL 1.5.
    #[error("loading libEGL.so.1 (Debian: libegl1 libegl-mesa0): {0}")]
    Load(String),
    /// An EGL call failed.
    #[error("{call} failed: {error}")]
    Egl {
        /// The EGL entry point.
        call: &'static str,
        /// The EGL error.
        error: egl::Error,
    },
    /// No EGL configuration renders OpenGL ES 3.
    #[error("no EGL configuration renders OpenGL ES 3")]
    NoConfig,
    /// The context is not llvmpipe (another driver answered).
    #[error("the GL renderer is {0:?}, not llvmpipe")]
    NotLlvmpipe(String),
    /// A shader failed to compile or link.
    #[error("{stage}: {log}")]
    Shader {
        /// Which shader or the link.
        stage: &'static str,
        /// The compiler's log.
        log: String,
    },
    /// A GL object could not be created, or the framebuffer is
    /// incomplete.
    #[error("{0}")]
    Gl(String),
    /// The scene does not fit what GL takes (sizes past `i32`).
    #[error("scene too large: {0}")]
    TooLarge(&'static str),
    /// The scene's data is inconsistent (an index past the vertices, a
    /// texture of the wrong size).
    #[error("bad scene: {0}")]
    BadScene(String),
}

/// The mesh, texture and target of a scene.
#[derive(Debug, Clone, Copy)]
pub struct SceneDesc<'a> {
    /// Vertices of eight floats: position x, y, z, texture u, normal x,
    /// y, z, texture v (the renderer's 32-byte layout).
    pub vertices: &'a [[f32; 8]],
    /// Three indices per triangle.
    pub indices: &'a [u32],
    /// The albedo texture, RGBA8 rows, top row first.
    pub texture_rgba8: &'a [u8],
    /// The texture's width and height in texels.
    pub texture_size_px: u32,
    /// The colour target's width in pixels.
    pub width_px: u32,
    /// The colour target's height in pixels.
    pub height_px: u32,
}

/// What changes per frame: transforms, light and clear colour.
///
/// The stack's convention is Vulkan's and Metal's: clip depth in [0, w]
/// and window depth z/w. GL clips depth to [-w, w] and maps it to
/// (z/w + 1) / 2, so [`Llvmpipe::draw`] hands GL the matrix with its depth
/// row replaced by 2 * depth row - w row: the same clipping, the same
/// window depth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameDesc {
    /// Object to clip space, rows; clip depth in [0, w].
    pub mvp: [[f32; 4]; 4],
    /// Object to eye space for normals, rows.
    pub normal_matrix: [[f32; 3]; 3],
    /// Unit vector towards the light.
    pub light: [f32; 3],
    /// Ambient term added to the diffuse factor.
    pub ambient: f32,
    /// Specular exponent.
    pub shininess: f32,
    /// Specular intensity.
    pub specular: f32,
    /// Output alpha.
    pub alpha: f32,
    /// Colour the target is cleared to.
    pub clear_colour: [f32; 4],
}

/// The environment llvmpipe reads when the first display is initialised:
/// software rendering through llvmpipe on `threads` rasteriser threads,
/// and no on-disk shader cache (so that a first frame always includes its
/// shader compilation). Give it to a child process (`Command::envs`), or
/// set it in this one with [`configure_environment`].
pub fn environment(threads: usize) -> [(&'static str, String); 4] {
    [
        ("LIBGL_ALWAYS_SOFTWARE", "1".into()),
        ("GALLIUM_DRIVER", "llvmpipe".into()),
        ("LP_NUM_THREADS", threads.to_string()),
        ("MESA_SHADER_CACHE_DISABLE", "true".into()),
    ]
}

/// Sets [`environment`] in this process. Setting the environment while
/// another thread reads it is a data race in the C library, so call it
/// while the process has one thread (a test binary's only test, before it
/// starts any), and before the first [`Llvmpipe::new`].
pub fn configure_environment(threads: usize) {
    for (name, value) in environment(threads) {
        std::env::set_var(name, value);
    }
}

/// The vertex shader: clip position from the MVP rows, the normal through
/// the normal matrix, u and v from the two halves of the vertex.
const VERTEX_SHADER: &str = "#version 300 es
layout(location = 0) in vec4 position_u;
layout(location = 1) in vec4 normal_v;
uniform mat4 mvp;
uniform mat3 normal_matrix;
out vec3 normal;
out vec2 uv;
void main() {
    gl_Position = mvp * vec4(position_u.xyz, 1.0);
    normal = normal_matrix * normal_v.xyz;
    uv = vec2(position_u.w, normal_v.w);
}
";

/// The fragment shader: albedo * (ambient + max(n.l, 0)) + specular *
/// max(n.l, 0)^shininess, with the interpolated normal normalised.
const FRAGMENT_SHADER: &str = "#version 300 es
precision highp float;
in vec3 normal;
in vec2 uv;
uniform sampler2D albedo;
uniform vec3 light;
uniform vec4 material; // ambient, shininess, specular, alpha
out vec4 colour;
void main() {
    vec4 texel = texture(albedo, uv);
    vec3 n = normal * inversesqrt(dot(normal, normal));
    float diffuse = dot(n, light);
    diffuse = diffuse > 0.0 ? diffuse : 0.0;
    // The stack's exp2(log2(0) * s) is exp2(-inf) = 0; GLSL leaves
    // log2(0) undefined, so zero is said outright.
    float highlight = diffuse > 0.0 ? exp2(log2(diffuse) * material.y) * material.z : 0.0;
    colour = vec4(texel.rgb * (diffuse + material.x) + highlight, material.w);
}
";

/// A GLES 3 context on llvmpipe with one scene loaded.
pub struct Llvmpipe {
    egl: egl::DynamicInstance<egl::EGL1_5>,
    display: egl::Display,
    context: egl::Context,
    gl: glow::Context,
    renderer: String,
    objects: SceneObjects,
    width_px: i32,
    height_px: i32,
    index_count: i32,
    /// The context is current on the creating thread only.
    not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for Llvmpipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llvmpipe")
            .field("renderer", &self.renderer)
            .field("width_px", &self.width_px)
            .field("height_px", &self.height_px)
            .finish_non_exhaustive()
    }
}

fn egl_err(call: &'static str) -> impl FnOnce(egl::Error) -> Error {
    move |error| Error::Egl { call, error }
}

fn to_i32(value: usize, what: &'static str) -> Result<i32, Error> {
    i32::try_from(value).map_err(|_| Error::TooLarge(what))
}

impl Llvmpipe {
    /// Opens llvmpipe (see [`configure_environment`]) and uploads
    /// `scene`: vertices, indices, texture, a colour and a 32-bit float
    /// depth target of the scene's size, and the program.
    pub fn new(scene: &SceneDesc<'_>) -> Result<Llvmpipe, Error> {
        let sizes = Sizes::of(scene)?;
        // SAFETY: libEGL.so.1 is the Khronos EGL library (libglvnd's
        // dispatcher on Debian); its entry points have the signatures
        // khronos-egl declares.
        let egl = unsafe { egl::DynamicInstance::<egl::EGL1_5>::load_required() }
            .map_err(|e| Error::Load(e.to_string()))?;
        /// EGL_PLATFORM_SURFACELESS_MESA (EGL_MESA_platform_surfaceless).
        const PLATFORM_SURFACELESS_MESA: egl::Enum = 0x31DD;
        // SAFETY: the surfaceless platform takes EGL_DEFAULT_DISPLAY (a
        // null native display) and reads nothing through it.
        let display = unsafe {
            egl.get_platform_display(
                PLATFORM_SURFACELESS_MESA,
                egl::DEFAULT_DISPLAY,
                &[egl::ATTRIB_NONE],
            )
        }
        .map_err(egl_err("eglGetPlatformDisplay"))?;
        egl.initialize(display).map_err(egl_err("eglInitialize"))?;
        // From here on, a failure releases the context. The display is
        // shared by every instance of the process and stays initialised.
        let context = create_context(&egl, display)?;
        let (gl, renderer, objects) = match open_scene(&egl, display, context, scene, &sizes) {
            Ok(parts) => parts,
            Err(e) => {
                let _ = egl.make_current(display, None, None, None);
                let _ = egl.destroy_context(display, context);
                return Err(e);
            }
        };
        Ok(Llvmpipe {
            egl,
            display,
            context,
            gl,
            renderer,
            objects,
            width_px: sizes.width_px,
            height_px: sizes.height_px,
            index_count: sizes.index_count,
            not_send: PhantomData,
        })
    }

    /// The GL renderer string (llvmpipe, its LLVM version and vector
    /// width).
    pub fn renderer(&self) -> &str {
        &self.renderer
    }

    fn make_current(&self) -> Result<(), Error> {
        self.egl
            .make_current(self.display, None, None, Some(self.context))
            .map_err(egl_err("eglMakeCurrent"))
    }

    /// Draws one frame and waits for it (`glFinish`).
    pub fn draw(&self, frame: &FrameDesc) -> Result<(), Error> {
        self.make_current()?;
        let gl = &self.gl;
        // Depth from [0, w] to GL's [-w, w] (see `FrameDesc`).
        let mut rows = frame.mvp;
        rows[2] = std::array::from_fn(|j| 2.0 * frame.mvp[2][j] - frame.mvp[3][j]);
        let mvp: Vec<f32> = rows.iter().flatten().copied().collect();
        let normal: Vec<f32> = frame.normal_matrix.iter().flatten().copied().collect();
        // SAFETY: the context is current on this thread (above), the
        // objects were created in it, the slices outlive the calls, and
        // every index is below the vertex count (`Sizes::of`), so the draw
        // reads only the vertex buffer.
        unsafe {
            gl.bind_framebuffer(glow::FRAMEBUFFER, Some(self.objects.framebuffer));
            gl.viewport(0, 0, self.width_px, self.height_px);
            gl.enable(glow::DEPTH_TEST);
            gl.depth_func(glow::LESS);
            gl.depth_mask(true);
            gl.disable(glow::CULL_FACE);
            // On by default in GL; the stack does not dither.
            gl.disable(glow::DITHER);
            let [r, g, b, a] = frame.clear_colour;
            gl.clear_color(r, g, b, a);
            gl.clear_depth_f32(1.0);
            gl.clear(glow::COLOR_BUFFER_BIT | glow::DEPTH_BUFFER_BIT);
            gl.use_program(Some(self.objects.program));
            let at = |name| gl.get_uniform_location(self.objects.program, name);
            // Rows given, so transposed into GL's columns.
            gl.uniform_matrix_4_f32_slice(at("mvp").as_ref(), true, &mvp);
            gl.uniform_matrix_3_f32_slice(at("normal_matrix").as_ref(), true, &normal);
            let [x, y, z] = frame.light;
            gl.uniform_3_f32(at("light").as_ref(), x, y, z);
            gl.uniform_4_f32(
                at("material").as_ref(),
                frame.ambient,
                frame.shininess,
                frame.specular,
                frame.alpha,
            );
            gl.active_texture(glow::TEXTURE0);
            gl.bind_texture(glow::TEXTURE_2D, Some(self.objects.texture));
            gl.uniform_1_i32(at("albedo").as_ref(), 0);
            gl.bind_vertex_array(Some(self.objects.vertex_array));
            gl.draw_elements(glow::TRIANGLES, self.index_count, glow::UNSIGNED_INT, 0);
            gl.finish();
            match gl.get_error() {
                glow::NO_ERROR => Ok(()),
                error => Err(Error::Gl(format!("draw: GL error {error:#x}"))),
            }
        }
    }

    /// The colour target as RGBA8 rows, top row first (GL's rows start at
    /// the bottom; they are turned over here to match the stack's).
    pub fn read_pixels(&self) -> Result<Vec<u8>, Error> {
        self.make_current()?;
        let row_bytes = 4 * self.width_px as usize;
        let mut pixels = vec![0u8; row_bytes * self.height_px as usize];
        // SAFETY: the context is current on this thread; `pixels` holds
        // exactly width x height RGBA8 pixels, pack alignment 4 matches
        // RGBA8 rows, and no pixel-pack buffer is bound (none is ever made)
        // nor a row length set, so GL writes only into `pixels`.
        unsafe {
            self.gl
                .bind_framebuffer(glow::READ_FRAMEBUFFER, Some(self.objects.framebuffer));
            self.gl.pixel_store_i32(glow::PACK_ALIGNMENT, 4);
            self.gl.read_pixels(
                0,
                0,
                self.width_px,
                self.height_px,
                glow::RGBA,
                glow::UNSIGNED_BYTE,
                glow::PixelPackData::Slice(Some(&mut pixels)),
            );
        }
        let mut top_first = Vec::with_capacity(pixels.len());
        for row in pixels.chunks_exact(row_bytes).rev() {
            top_first.extend_from_slice(row);
        }
        Ok(top_first)
    }
}

/// A scene's sizes as GL takes them.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    width_px: i32,
    height_px: i32,
    texture_px: i32,
    index_count: i32,
}

impl Sizes {
    fn of(scene: &SceneDesc<'_>) -> Result<Sizes, Error> {
        let texels_bytes = 4 * scene.texture_size_px as usize * scene.texture_size_px as usize;
        if scene.texture_rgba8.len() != texels_bytes {
            return Err(Error::BadScene(format!(
                "texture of {} bytes for {} texels square",
                scene.texture_rgba8.len(),
                scene.texture_size_px
            )));
        }
        // GL reads vertices at whatever the indices say: every one must be
        // inside the vertex buffer.
        if let Some(bad) = scene
            .indices
            .iter()
            .find(|&&i| i as usize >= scene.vertices.len())
        {
            return Err(Error::BadScene(format!(
                "index {bad} past {} vertices",
                scene.vertices.len()
            )));
        }
        if !scene.indices.len().is_multiple_of(3) {
            return Err(Error::BadScene(format!(
                "{} indices: not whole triangles",
                scene.indices.len()
            )));
        }
        Ok(Sizes {
            width_px: to_i32(scene.width_px as usize, "width")?,
            height_px: to_i32(scene.height_px as usize, "height")?,
            texture_px: to_i32(scene.texture_size_px as usize, "texture size")?,
            index_count: to_i32(scene.indices.len(), "index count")?,
        })
    }
}

/// The GL objects of a scene.
#[derive(Debug, Clone, Copy)]
struct SceneObjects {
    program: glow::Program,
    /// Vertices, then indices.
    buffers: [glow::Buffer; 2],
    vertex_array: glow::VertexArray,
    texture: glow::Texture,
    framebuffer: glow::Framebuffer,
    /// Colour, then depth.
    renderbuffers: [glow::Renderbuffer; 2],
}

/// An OpenGL ES 3 context on an initialised display.
fn create_context(
    egl: &egl::DynamicInstance<egl::EGL1_5>,
    display: egl::Display,
) -> Result<egl::Context, Error> {
    egl.bind_api(egl::OPENGL_ES_API)
        .map_err(egl_err("eglBindAPI"))?;
    let config = egl
        .choose_first_config(
            display,
            // The default surface type is a window, which the
            // surfaceless platform has none of.
            &[
                egl::RENDERABLE_TYPE,
                egl::OPENGL_ES3_BIT,
                egl::SURFACE_TYPE,
                egl::PBUFFER_BIT,
                egl::NONE,
            ],
        )
        .map_err(egl_err("eglChooseConfig"))?
        .ok_or(Error::NoConfig)?;
    egl.create_context(
        display,
        config,
        None,
        &[egl::CONTEXT_MAJOR_VERSION, 3, egl::NONE],
    )
    .map_err(egl_err("eglCreateContext"))
}

/// Makes `context` current, checks that it is llvmpipe and uploads the
/// scene into it.
fn open_scene(
    egl: &egl::DynamicInstance<egl::EGL1_5>,
    display: egl::Display,
    context: egl::Context,
    scene: &SceneDesc<'_>,
    sizes: &Sizes,
) -> Result<(glow::Context, String, SceneObjects), Error> {
    egl.make_current(display, None, None, Some(context))
        .map_err(egl_err("eglMakeCurrent"))?;
    // SAFETY: the context is current on this thread, and
    // eglGetProcAddress returns the entry points of that context's
    // API (or null, which glow treats as absent).
    let gl = unsafe {
        glow::Context::from_loader_function(|name| {
            egl.get_proc_address(name)
                .map_or(std::ptr::null(), |f| f as *const std::ffi::c_void)
        })
    };
    // SAFETY: the context is current on this thread.
    let renderer = unsafe { gl.get_parameter_string(glow::RENDERER) };
    if !renderer.contains("llvmpipe") {
        return Err(Error::NotLlvmpipe(renderer));
    }
    let Sizes {
        width_px,
        height_px,
        texture_px,
        ..
    } = *sizes;
    let vertex_bytes: Vec<u8> = scene
        .vertices
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let index_bytes: Vec<u8> = scene.indices.iter().flat_map(|i| i.to_le_bytes()).collect();
    // SAFETY: the context is current on this thread; every slice
    // passed lives until the call returns (GL copies the data).
    let objects = unsafe {
        let program = link_program(&gl)?;
        let buffers = [
            gl.create_buffer().map_err(Error::Gl)?,
            gl.create_buffer().map_err(Error::Gl)?,
        ];
        let vertex_array = gl.create_vertex_array().map_err(Error::Gl)?;
        gl.bind_vertex_array(Some(vertex_array));
        gl.bind_buffer(glow::ARRAY_BUFFER, Some(buffers[0]));
        gl.buffer_data_u8_slice(glow::ARRAY_BUFFER, &vertex_bytes, glow::STATIC_DRAW);
        gl.bind_buffer(glow::ELEMENT_ARRAY_BUFFER, Some(buffers[1]));
        gl.buffer_data_u8_slice(glow::ELEMENT_ARRAY_BUFFER, &index_bytes, glow::STATIC_DRAW);
        for attribute in 0..2 {
            gl.enable_vertex_attrib_array(attribute);
            gl.vertex_attrib_pointer_f32(
                attribute,
                4,
                glow::FLOAT,
                false,
                32,
                16 * attribute as i32,
            );
        }
        let texture = gl.create_texture().map_err(Error::Gl)?;
        gl.bind_texture(glow::TEXTURE_2D, Some(texture));
        gl.tex_image_2d(
            glow::TEXTURE_2D,
            0,
            glow::RGBA8 as i32,
            texture_px,
            texture_px,
            0,
            glow::RGBA,
            glow::UNSIGNED_BYTE,
            glow::PixelUnpackData::Slice(Some(scene.texture_rgba8)),
        );
        for (parameter, value) in [
            (glow::TEXTURE_MIN_FILTER, glow::LINEAR),
            (glow::TEXTURE_MAG_FILTER, glow::LINEAR),
            (glow::TEXTURE_WRAP_S, glow::REPEAT),
            (glow::TEXTURE_WRAP_T, glow::REPEAT),
        ] {
            gl.tex_parameter_i32(glow::TEXTURE_2D, parameter, value as i32);
        }
        let framebuffer = gl.create_framebuffer().map_err(Error::Gl)?;
        gl.bind_framebuffer(glow::FRAMEBUFFER, Some(framebuffer));
        let renderbuffers = [
            gl.create_renderbuffer().map_err(Error::Gl)?,
            gl.create_renderbuffer().map_err(Error::Gl)?,
        ];
        for (renderbuffer, format, attachment) in [
            (renderbuffers[0], glow::RGBA8, glow::COLOR_ATTACHMENT0),
            (
                renderbuffers[1],
                glow::DEPTH_COMPONENT32F,
                glow::DEPTH_ATTACHMENT,
            ),
        ] {
            gl.bind_renderbuffer(glow::RENDERBUFFER, Some(renderbuffer));
            gl.renderbuffer_storage(glow::RENDERBUFFER, format, width_px, height_px);
            gl.framebuffer_renderbuffer(
                glow::FRAMEBUFFER,
                attachment,
                glow::RENDERBUFFER,
                Some(renderbuffer),
            );
        }
        let status = gl.check_framebuffer_status(glow::FRAMEBUFFER);
        if status != glow::FRAMEBUFFER_COMPLETE {
            return Err(Error::Gl(format!("framebuffer incomplete: {status:#x}")));
        }
        SceneObjects {
            program,
            buffers,
            vertex_array,
            texture,
            framebuffer,
            renderbuffers,
        }
    };
    Ok((gl, renderer, objects))
}

/// Compiles and links the scene's program.
///
/// # Safety
///
/// A GLES 3 context must be current on the calling thread.
unsafe fn link_program(gl: &glow::Context) -> Result<glow::Program, Error> {
    // SAFETY: the caller makes a context current on this thread.
    unsafe {
        let program = gl.create_program().map_err(Error::Gl)?;
        for (stage, kind, source) in [
            ("vertex shader", glow::VERTEX_SHADER, VERTEX_SHADER),
            ("fragment shader", glow::FRAGMENT_SHADER, FRAGMENT_SHADER),
        ] {
            let shader = gl.create_shader(kind).map_err(Error::Gl)?;
            gl.shader_source(shader, source);
            gl.compile_shader(shader);
            if !gl.get_shader_compile_status(shader) {
                return Err(Error::Shader {
                    stage,
                    log: gl.get_shader_info_log(shader),
                });
            }
            gl.attach_shader(program, shader);
            gl.delete_shader(shader);
        }
        gl.link_program(program);
        if !gl.get_program_link_status(program) {
            return Err(Error::Shader {
                stage: "link",
                log: gl.get_program_info_log(program),
            });
        }
        Ok(program)
    }
}

impl Drop for Llvmpipe {
    fn drop(&mut self) {
        if self.make_current().is_ok() {
            // SAFETY: the context is current on this thread and owns
            // every object deleted here; none is used afterwards.
            unsafe {
                let gl = &self.gl;
                gl.delete_framebuffer(self.objects.framebuffer);
                for renderbuffer in self.objects.renderbuffers {
                    gl.delete_renderbuffer(renderbuffer);
                }
                gl.delete_texture(self.objects.texture);
                gl.delete_vertex_array(self.objects.vertex_array);
                for buffer in self.objects.buffers {
                    gl.delete_buffer(buffer);
                }
                gl.delete_program(self.objects.program);
            }
        }
        let _ = self.egl.make_current(self.display, None, None, None);
        let _ = self.egl.destroy_context(self.display, self.context);
        // The display stays initialised: the surfaceless platform hands
        // every caller the same one, and terminating it would pull it from
        // under other instances.
    }
}
